"""Checks of the values the package passes to the C API. ctypes would turn 1.5e6 into a bare
TypeError and a negative byte count into a huge unsigned one (headroom=-5 made every allocation
fail); these say what was wrong, in the caller's words, before the library is called."""

import numbers
import operator

from . import _errors

# The largest byte count the library takes: beyond it, no device holds that much (and a negative
# number stored unsigned lands there).
MAX_BYTES = 2**63 - 1
MAX_POINTER = 2**64 - 1
MAX_DEVICE = 2**31 - 1  # a C int


def merged_options(kind, options, changes):
    """`options` (a dict of the values in force) updated with `changes`; an option name it does not
    have raises TypeError naming the known ones. `kind` names them in the message ("pool")."""
    unknown = set(changes) - set(options)
    if unknown:
        raise TypeError(f"unknown {kind} options: {', '.join(sorted(unknown))}; "
                        f"known: {', '.join(sorted(options))}")
    options.update(changes)
    return options


def integer(function, name, value, minimum=0, maximum=MAX_BYTES, what="an integer"):
    """`value` as an int, or TypeError (not an integer: floats too, even 1.5e6 or 2.0) or
    InvalidArgumentError, a ValueError (outside [minimum, maximum])."""
    if isinstance(value, bool):
        raise TypeError(f"tidepool.{function}: {name} must be {what}, not a bool ({value!r})")
    try:
        number = operator.index(value)
    except TypeError:
        hint = ""
        if isinstance(value, float) and value.is_integer():
            hint = f"; write int({value!r}) to pass {int(value)}"
        raise TypeError(f"tidepool.{function}: {name} must be {what}, not {type(value).__name__} "
                        f"{value!r}{hint}") from None
    if not minimum <= number <= maximum:
        raise _errors.InvalidArgumentError(
            _errors.INVALID_ARGUMENT,
            f"tidepool.{function}: {name} is {number}: expected {what} from {minimum} to {maximum}")
    return number


def byte_count(function, name, value, allow_none=False):
    """A number of bytes (0 to 2**63 - 1), or None where `allow_none` (no limit)."""
    if value is None and allow_none:
        return None
    return integer(function, name, value, what="a number of bytes" + (" or None" if allow_none else ""))


def device(function, value, any_device=False):
    """A device ordinal (-1, tidepool.ANY_DEVICE, where `any_device`)."""
    return integer(function, "device", value, minimum=-1 if any_device else 0, maximum=MAX_DEVICE,
                   what="a device number")


def pointer(function, name, value):
    """A device pointer as an int (None: NULL)."""
    if value is None:
        return None
    return integer(function, name, value, maximum=MAX_POINTER, what="a device pointer (an int)")


def stream(function, value):
    """A cudaStream_t as an int, or None (0 too) for the default stream."""
    if value is None:
        return None
    return integer(function, "stream", value, maximum=MAX_POINTER, what="a stream (an int or None)") or None


def flag(function, name, value):
    """1 or 0 for True or False (not 1 or 0 themselves)."""
    if not isinstance(value, bool):
        raise TypeError(f"tidepool.{function}: {name} must be True or False, not {value!r}")
    return 1 if value else 0


def real(function, name, value):
    """A real number (int or float, not bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"tidepool.{function}: {name} must be a number, not {type(value).__name__} {value!r}")
    return float(value)

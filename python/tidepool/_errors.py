"""Errors raised by the tidepool package, one per status of the C API (include/tidepool/c_api.h)."""

SUCCESS = 0
INVALID_SIZE = 1
INVALID_POINTER = 2
DOUBLE_FREE = 3
INVALID_STREAM = 4
INVALID_DEVICE = 5
INVALID_ARGUMENT = 6
DRIVER_FAILURE = 7
UNAVAILABLE = 8
OUT_OF_MEMORY = 9
INTERNAL_ERROR = 10
ASLEEP = 11

STATUS_NAMES = {
    SUCCESS: "TIDEPOOL_SUCCESS",
    INVALID_SIZE: "TIDEPOOL_INVALID_SIZE",
    INVALID_POINTER: "TIDEPOOL_INVALID_POINTER",
    DOUBLE_FREE: "TIDEPOOL_DOUBLE_FREE",
    INVALID_STREAM: "TIDEPOOL_INVALID_STREAM",
    INVALID_DEVICE: "TIDEPOOL_INVALID_DEVICE",
    INVALID_ARGUMENT: "TIDEPOOL_INVALID_ARGUMENT",
    DRIVER_FAILURE: "TIDEPOOL_DRIVER_FAILURE",
    UNAVAILABLE: "TIDEPOOL_UNAVAILABLE",
    OUT_OF_MEMORY: "TIDEPOOL_OUT_OF_MEMORY",
    INTERNAL_ERROR: "TIDEPOOL_INTERNAL_ERROR",
    ASLEEP: "TIDEPOOL_ASLEEP",
}


class TidepoolError(RuntimeError):
    """A call into libtidepool failed. `status` is the C status code, `name` its name."""

    def __init__(self, status, message):
        self.status = status
        self.name = STATUS_NAMES.get(status, "TIDEPOOL_UNKNOWN_STATUS")
        super().__init__(f"{self.name}: {message}" if message else self.name)


class OutOfMemoryError(TidepoolError, MemoryError):
    """An allocation failed after every reclaim step (own cache, async pools, reclaim hooks)."""


class InvalidArgumentError(TidepoolError, ValueError):
    """A value the library refuses: a bad option, a negative byte count, options set too late."""


class AsleepError(TidepoolError):
    """A tag's memory is asleep (allocating in it, sleeping it again), or not asleep (waking it)."""


class LibraryNotFoundError(TidepoolError, OSError):
    """libtidepool.so could not be found or loaded."""

    def __init__(self, message):
        super().__init__(UNAVAILABLE, message)


def error_for(status, message):
    """The exception for a failed status."""
    if status == OUT_OF_MEMORY:
        return OutOfMemoryError(status, message)
    if status == INVALID_ARGUMENT:
        return InvalidArgumentError(status, message)
    if status == ASLEEP:
        return AsleepError(status, message)
    return TidepoolError(status, message)

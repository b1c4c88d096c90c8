"""An optimizer's state made persistent (tidepool.torch.persistent_optimizer_state): what Adam and
its kin make in their first step (the moments, one or two tensors the size of each parameter) lives
until training ends, and in a pool that places it in the holes the first step's activations left
it shares their handles with gradients and pins them: after torch.cuda.empty_cache() tidepool still
holds those handles whole (docs/RESULTS.md, section 0, "Held after release: what the layout pins").
Made under tidepool.persistent(), it is placed apart instead, and empty_cache() hands the scratch
back whole.

PyTorch's Adam, AdamW, NAdam, RAdam, Adamax, RMSprop, Adadelta and ASGD make their state in
`_init_group`: for them only that runs persistent, so the step's temporaries stay scratch. Other
optimizers (SGD makes its momentum buffers inside the step; a custom one may do anything) run a
step that will make state (a parameter with a gradient has none yet) persistent as a whole, its
temporaries too. Adagrad makes its state when it is constructed: construct it under
tidepool.persistent() instead."""

import functools

from . import _lifetime

# PyTorch's optimizers whose `_init_group` makes their state (torch/optim/*.py).
STATE_MADE_IN_INIT_GROUP = frozenset({"Adam", "AdamW", "NAdam", "RAdam", "Adamax", "RMSprop", "Adadelta", "ASGD"})


def _pytorch_state_in_init_group(optimizer):
    """Whether `optimizer` is (or derives from) one of PyTorch's optimizers that make their state in
    `_init_group`."""
    return any(cls.__module__.startswith("torch.optim") and cls.__name__ in STATE_MADE_IN_INIT_GROUP
               for cls in type(optimizer).__mro__)


def _makes_state(optimizer):
    """Whether the next step will make state: a parameter with a gradient has none yet."""
    state = optimizer.state
    for group in optimizer.param_groups:
        for p in group["params"]:
            if getattr(p, "grad", None) is not None and (p not in state or not state[p]):
                return True
    return False


def persistent_optimizer_state(optimizer, state_made_in_init_group=None):
    """Makes what `optimizer` keeps between steps persistent in tidepool (see the module's text);
    returns `optimizer`. `state_made_in_init_group`: whether its `_init_group` makes all of its
    state (None: known for PyTorch's own optimizers, no for others). Call it once, before the first
    step; a second call changes nothing."""
    if getattr(optimizer, "_tidepool_persistent_state", False):
        return optimizer
    if state_made_in_init_group is None:
        state_made_in_init_group = _pytorch_state_in_init_group(optimizer)
    init_group = getattr(optimizer, "_init_group", None)
    if state_made_in_init_group:
        if not callable(init_group):
            raise TypeError(f"{type(optimizer).__name__} has no _init_group to make its state in")

        @functools.wraps(init_group)
        def init_group_persistent(*args, **kwargs):
            with _lifetime.persistent():
                return init_group(*args, **kwargs)

        optimizer._init_group = init_group_persistent
    else:
        step = optimizer.step

        @functools.wraps(step)
        def step_persistent_while_making_state(*args, **kwargs):
            if not _makes_state(optimizer):
                return step(*args, **kwargs)
            with _lifetime.persistent():
                return step(*args, **kwargs)

        optimizer.step = step_persistent_while_making_state
    optimizer._tidepool_persistent_state = True
    return optimizer

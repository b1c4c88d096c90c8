"""An optimizer's state made persistent (tidepool.torch.persistent_optimizer_state): what Adam and
its kin make in their first step (the moments, one or two tensors the size of each parameter) lives
until training ends, and in a pool that places it in the holes the first step's activations left
it shares their handles and pins them: after torch.cuda.empty_cache() tidepool still holds those
handles whole (docs/RESULTS.md, section 0, "Held after release"). Made under tidepool.persistent(),
it is placed apart instead, and empty_cache() hands the scratch back whole.

PyTorch's optimizers make their state in `_init_group` (Adam, AdamW, RMSprop, Adagrad, NAdam, RAdam,
Adamax, ASGD, Adadelta, SGD's momentum list): where the optimizer has one, only that runs
persistent, so the step's temporaries stay scratch. Elsewhere a step that will make state (some
parameter with a gradient has none yet) runs persistent as a whole, its temporaries too."""

import functools

from . import _lifetime


def _makes_state(optimizer):
    """Whether the next step will make state: a parameter with a gradient has none yet."""
    state = optimizer.state
    for group in optimizer.param_groups:
        for p in group["params"]:
            if getattr(p, "grad", None) is not None and (p not in state or not state[p]):
                return True
    return False


def persistent_optimizer_state(optimizer):
    """Makes what `optimizer` keeps between steps persistent in tidepool (see the module's text);
    returns `optimizer`. Call it once, before the first step; a second call changes nothing."""
    if getattr(optimizer, "_tidepool_persistent_state", False):
        return optimizer
    init_group = getattr(optimizer, "_init_group", None)
    if callable(init_group):
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

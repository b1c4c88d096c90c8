"""The thread's lifetime hint: tidepool.persistent(), what tidepool.allocate() and the frameworks'
entry points do under it, and tidepool.torch.persistent_optimizer_state over optimizers shaped as
PyTorch's (with and without `_init_group`), on sim."""

import threading

import pytest

from sim_support import MiB
from tidepool import _library
from tidepool._torch_optimizer_state import persistent_optimizer_state


def placed_persistent(tp, ptr):
    blocks = [b for b in tp.describe(0)["blocks"] if b["address"] == ptr and b["state"] == "live"]
    assert len(blocks) == 1, f"no live block at {ptr:#x}"
    return blocks[0]["persistent"]


def test_persistent_sets_the_hint_for_its_block_and_restores_it(tp):
    assert not tp.allocating_persistent()
    with tp.persistent():
        assert tp.allocating_persistent()
        with tp.persistent():
            assert tp.allocating_persistent()
        assert tp.allocating_persistent()  # the inner block restores what the outer one set
    assert not tp.allocating_persistent()
    with pytest.raises(ZeroDivisionError):
        with tp.persistent():
            1 / 0
    assert not tp.allocating_persistent()  # an exception restores it too


def test_another_threads_hint_is_its_own(tp):
    seen = []
    with tp.persistent():
        worker = threading.Thread(target=lambda: seen.append(tp.allocating_persistent()))
        worker.start()
        worker.join()
        assert tp.allocating_persistent()
    assert seen == [False]


def test_allocate_takes_the_threads_hint_unless_told(tp):
    scratch = tp.allocate(3 * MiB)
    with tp.persistent():
        kept = tp.allocate(3 * MiB)
        told_scratch = tp.allocate(3 * MiB, persistent=False)
    told_persistent = tp.allocate(3 * MiB, persistent=True)
    try:
        assert not placed_persistent(tp, scratch)
        assert placed_persistent(tp, kept)
        assert not placed_persistent(tp, told_scratch)
        assert placed_persistent(tp, told_persistent)
    finally:
        for ptr in (scratch, kept, told_scratch, told_persistent):
            tp.deallocate(ptr)


def test_the_frameworks_entry_points_follow_the_hint(tp):
    alloc = _library.TORCH_ALLOC_FN(_library.function_address("tidepool_torch_alloc"))
    free = _library.TORCH_FREE_FN(_library.function_address("tidepool_torch_free"))
    malloc = _library.CUPY_MALLOC_FN(_library.function_address("tidepool_cupy_malloc"))
    cupy_free = _library.CUPY_FREE_FN(_library.function_address("tidepool_cupy_free"))
    with tp.persistent():
        weights = alloc(5 * MiB, 0, None)
        table = malloc(None, 4096, 0)
    activations = alloc(5 * MiB, 0, None)
    try:
        assert placed_persistent(tp, weights)
        assert placed_persistent(tp, table)
        assert not placed_persistent(tp, activations)
    finally:
        free(weights, 5 * MiB, 0, None)
        free(activations, 5 * MiB, 0, None)
        cupy_free(None, table, 0)


def test_a_value_that_is_no_hint_is_refused(tp, lib):
    from tidepool import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="lifetime hint 5"):
        _library.check(lib.tidepool_set_thread_lifetime(5))
    assert not tp.allocating_persistent()


class Parameter:
    def __init__(self, grad=True):
        self.grad = object() if grad else None


class AdamLike:
    """Adam's shape: state made in _init_group on the first step, a temporary in every step."""

    def __init__(self, tp, params):
        self.tp = tp
        self.param_groups = [{"params": params}]
        self.state = {}
        self.temporaries = []

    def _init_group(self, group):
        for p in group["params"]:
            if p.grad is not None and p not in self.state:
                self.state[p] = {"exp_avg": self.tp.allocate(2 * MiB)}

    def step(self):
        for group in self.param_groups:
            self._init_group(group)
        temporary = self.tp.allocate(2 * MiB)
        self.temporaries.append(placed_persistent(self.tp, temporary))
        self.tp.deallocate(temporary)


class SgdLike(AdamLike):
    """As PyTorch's SGD: an _init_group that makes no state, the state made inside step()."""

    def _init_group(self, group):
        pass

    def step(self, fail=False):
        for p in self.param_groups[0]["params"]:
            if p.grad is not None and p not in self.state:
                self.state[p] = {"momentum": self.tp.allocate(2 * MiB)}
        temporary = self.tp.allocate(2 * MiB)
        self.temporaries.append(placed_persistent(self.tp, temporary))
        self.tp.deallocate(temporary)
        if fail:
            raise RuntimeError("a step that fails")


def free_state(tp, optimizer):
    for state in optimizer.state.values():
        for ptr in state.values():
            tp.deallocate(ptr)


def test_persistent_optimizer_state_keeps_only_adams_state_apart(tp):
    params = [Parameter(), Parameter(), Parameter(grad=False)]
    optimizer = AdamLike(tp, params)
    assert persistent_optimizer_state(optimizer, state_made_in_init_group=True) is optimizer
    assert persistent_optimizer_state(optimizer) is optimizer  # a second call changes nothing
    try:
        optimizer.step()
        optimizer.step()
        assert len(optimizer.state) == 2
        assert all(placed_persistent(tp, s["exp_avg"]) for s in optimizer.state.values())
        assert optimizer.temporaries == [False, False]  # the step's temporaries stay scratch
        params[2].grad = object()  # a parameter that gets its first gradient later
        optimizer.step()
        assert placed_persistent(tp, optimizer.state[params[2]]["exp_avg"])
        assert not tp.allocating_persistent()
    finally:
        free_state(tp, optimizer)


def test_pytorchs_own_optimizers_are_known_by_class():
    from tidepool._torch_optimizer_state import _pytorch_state_in_init_group

    adam = type("Adam", (), {"__module__": "torch.optim.adam"})
    custom_adam = type("MyAdam", (adam,), {"__module__": "my_project"})
    sgd = type("SGD", (), {"__module__": "torch.optim.sgd"})
    look_alike = type("Adam", (), {"__module__": "my_project"})
    assert _pytorch_state_in_init_group(adam())
    assert _pytorch_state_in_init_group(custom_adam())  # a subclass of PyTorch's Adam
    assert not _pytorch_state_in_init_group(sgd())
    assert not _pytorch_state_in_init_group(look_alike())


def test_an_optimizer_said_to_make_its_state_in_init_group_must_have_one(tp):
    class NoInitGroup:
        state, param_groups = {}, []

        def step(self):
            pass

    with pytest.raises(TypeError, match="NoInitGroup has no _init_group"):
        persistent_optimizer_state(NoInitGroup(), state_made_in_init_group=True)


def test_persistent_optimizer_state_elsewhere_runs_state_making_steps_persistent(tp):
    params = [Parameter(), Parameter()]
    optimizer = persistent_optimizer_state(SgdLike(tp, params))
    try:
        optimizer.step()  # makes state: the whole step is persistent, its temporary too
        optimizer.step()  # makes none: scratch
        assert all(placed_persistent(tp, s["momentum"]) for s in optimizer.state.values())
        assert optimizer.temporaries == [True, False]
        params.append(Parameter())
        optimizer.param_groups[0]["params"] = params
        with pytest.raises(RuntimeError, match="a step that fails"):
            optimizer.step(fail=True)
        assert not tp.allocating_persistent()  # a failing step leaves the hint as it was
        assert placed_persistent(tp, optimizer.state[params[2]]["momentum"])
    finally:
        free_state(tp, optimizer)

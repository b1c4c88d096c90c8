"""CUDA graphs captured through tidepool.torch.use() (several graphs in CUDA's default capture
mode) and tidepool.cupy.use(): replays compute what eager code does; a graph's memory is never
handed to eager tensors while it lives, even after the program drops its output and releases the
cache; once the graphs are destroyed their memory comes back. Captures given one PyTorch pool (an
inference server's graphs, one per batch size) hold about what PyTorch's own allocator holds for
them, and a training step graphed by make_graphed_callables trains as eager code does, its
captures sharing memory as they do in PyTorch's one pool. Captures overlapping on two threads,
each given its own pool, keep to it."""

from gpu_support import require, run_workload

MiB = 1 << 20


def test_graph_memory_stays_with_the_graph_until_it_is_destroyed():
    require("torch")
    reference = run_workload("torch_graph_capture.py", "default")
    assert reference["replays_match_eager"] and reference["eager_intact"], reference
    r = run_workload("torch_graph_capture.py", "tidepool")
    assert r["replays_match_eager"], r
    assert r["graphs_kept"] >= 4, r  # one per capture (and stream)
    # The dropped output (4 MiB) and the freed intermediates stay the graphs'.
    assert r["graph_kept_bytes"] >= 4 * MiB, r
    assert r["eager_on_graph_memory"] == 0, r
    assert r["eager_intact"], r
    assert r["kept_replays_match_eager"], r
    assert r["graphs_after_destroy"] == 0, r
    assert r["released_after_destroy"] >= r["graph_kept_bytes"], r
    assert r["mapped_after"] - r["in_use_after"] < 64 * MiB, r


def test_a_cupy_capture_keeps_its_memory_until_the_graph_is_destroyed():
    require("cupy")
    r = run_workload("cupy_graph_capture.py")
    assert r["graphs_kept"] == 1, r
    assert r["graph_ran"], r
    assert r["graph_kept_bytes"] >= 32 * MiB, r  # the temporary and the dropped output
    assert r["eager_on_graph_memory"] == 0, r
    assert r["eager_intact"], r
    assert r["graphs_after_destroy"] == 0, r
    assert r["released_after_destroy"] >= 32 * MiB, r


def test_captures_given_one_pool_hold_what_pytorchs_shared_pool_holds():
    # torch.cuda.graph(pool=...) reaches tidepool through use(), and so does CUDAGraph.capture_begin
    # (pool) called directly; a GraphPool the program entered itself does the same.
    require("torch")
    modes = ("default", "default-private", "tidepool", "tidepool-private", "tidepool-shared", "tidepool-direct")
    r = {mode: run_workload("torch_graph_pool.py", mode) for mode in modes}
    for mode, figures in r.items():
        assert figures["served_replays_match_eager"], figures
        assert figures["outputs_kept_after_replays_in_capture_order"], figures
    mapped, explicit, alone, direct = r["tidepool"], r["tidepool-shared"], r["tidepool-private"], r["tidepool-direct"]
    assert mapped["graph_pool_of_shared_pool"] != 0 and direct["graph_pool_of_shared_pool"] != 0, r
    for figures in (mapped, explicit, alone, direct):
        assert figures["graphs_kept"] == figures["batches"], r
        assert figures["graphs_after_destroy"] == 0, figures
        # The graphs' memory comes back on release(): held grows from before the captures by no
        # more than what the program still holds (the capture stream's cuBLAS workspace) and one
        # 64 MiB handle that it may pin in part.
        grown_in_use = figures["in_use_after_destroy"] - figures["in_use_before"]
        assert figures["held_after_destroy"] - figures["held_before"] <= grown_in_use + 64 * MiB, figures
        # compact() leaves the granules live tensors touch, and what else is live (the workspace)
        # in granules, with up to a granule at each end of each.
        others = figures["in_use_after_destroy"] - figures["live_tensor_bytes"]
        assert figures["held_after_compact"] <= figures["touched_granule_bytes"] + others + 8 * MiB, figures
    # One working set for all the captures, not one each (the figures: docs/RESULTS.md 11).
    for shared in (mapped, explicit, direct):
        assert shared["graph_bytes"] < 0.6 * alone["graph_bytes"], r
        assert shared["graph_bytes"] <= 1.5 * r["default"]["graph_bytes"] + 48 * MiB, r


def test_a_graphed_training_step_trains_as_eager_code_does_and_its_captures_share_memory():
    # torch.cuda.make_graphed_callables gives its captures one pool; the backward capture allocates
    # on PyTorch's autograd thread, which the graph pool use() enters for all threads reaches.
    require("torch")
    r = {mode: run_workload("torch_graphed_callables.py", mode)
         for mode in ("default", "tidepool", "tidepool-shared")}
    for mode, figures in r.items():
        assert figures["losses_match"] and figures["weights_match"], figures
    for figures in (r["tidepool"], r["tidepool-shared"]):
        assert figures["graphs_kept"] >= 2, figures  # the forward and the backward graph
        assert figures["held_growth_after_step_2"] == 0, figures
        assert figures["graphs_after_destroy"] == 0, figures
        assert figures["held_after_destroy"] - figures["in_use_after_destroy"] < 64 * MiB, figures
        # The backward capture reuses what the forward one freed, as in PyTorch's one pool
        # (captures that share nothing hold about 1.24x PyTorch's: docs/RESULTS.md 11).
        assert figures["graph_bytes"] <= 1.1 * r["default"]["graph_bytes"] + 16 * MiB, r


def test_torch_compile_reduce_overhead_trains_through_tidepool_as_through_pytorchs_allocator():
    # PyTorch's CUDA graph trees refuse every pluggable allocator; use() turns them off, and
    # inductor's graphs are then captured through torch.cuda.graph.
    require("torch")
    reference = run_workload("torch_compile_graphs.py", "default")
    r = run_workload("torch_compile_graphs.py", "tidepool")
    assert r["cudagraph_trees"] is False, r
    assert len(r["losses"]) == 12 and r["losses"] == reference["losses"], (r, reference)
    assert r["graphs"] >= 2, r  # forward and backward graphs, per batch size
    assert r["held"] - r["in_use"] < 64 * MiB, r


def test_captures_overlapping_on_two_threads_each_keep_to_their_own_pool():
    # Each torch.cuda.graph capture is given its pool's graph pool, which wins over the
    # all-threads default that the other thread's capture replaced meanwhile.
    require("torch")
    r = {mode: run_workload("torch_graph_threads.py", mode)
         for mode in ("default", "tidepool", "tidepool-thread-only")}
    for mode in ("default", "tidepool"):
        figures = r[mode]
        assert not figures["errors"], r
        assert figures["shared_bytes"] == 0, r
        assert figures["concurrent_rounds_matching_eager"] == figures["concurrent_rounds"], r
    pools = r["tidepool"]["graph_pools"]
    assert 0 not in pools and pools[0] != pools[1], r
    # The first capture's memory was in its own graph pool: it comes back with its graph.
    mapped = r["tidepool"]
    assert mapped["kept_bytes_before"] - mapped["kept_bytes_after_first_graph_destroyed"] >= 16 * MiB, r
    # Without the pool given to each capture ("tidepool-thread-only") the figures are printed, not
    # checked: on the H200 they were the same (docs/RESULTS.md, "A graph pool given to the capture").
    print("captures on two threads:", r)

"""CUDA graphs captured through tidepool.torch.use() (several graphs in CUDA's default capture
mode) and tidepool.cupy.use(): replays compute what eager code does; a graph's memory is never
handed to eager tensors while it lives, even after the program drops its output and releases the
cache; once the graphs are destroyed their memory comes back."""

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

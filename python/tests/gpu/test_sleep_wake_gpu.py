"""Sleep and wake on a real GPU (issue 13): a model's weights, gradients and AdamW state slept
(contents kept) and woken between training steps give bit-identical losses and weights to runs
without sleep; NVML shows the memory gone while asleep; a CUDA graph captured over a tag's tensors
(a torch.cuda.MemPool over tidepool) replays correctly after wake; the same MemPool route runs
unchanged after tidepool.torch.use(); a tensor another process maps stays awake through sleep."""

from gpu_support import require, run_workload

MiB = 1 << 20
# A sleep makes a stream and pinned host memory of its own; either may take a little device memory
# of the driver's, which NVML counts (not the pool's).
NVML_SLACK = 4 * MiB


def test_training_with_sleep_between_steps_is_bit_identical():
    require("torch", "pynvml")
    default = run_workload("sleep_wake_training.py", "default")
    routed = run_workload("sleep_wake_training.py", "tidepool")
    slept = run_workload("sleep_wake_training.py", "sleep")
    assert routed["losses"] == default["losses"]
    assert slept["losses"] == routed["losses"]
    assert slept["weights"] == routed["weights"] == default["weights"]
    assert slept["same_addresses"]
    # Weights, gradients (made on PyTorch's autograd thread) and AdamW's two moments: all in the tag.
    assert slept["train_tag_live"] >= 4 * slept["parameters"], slept
    assert len(slept["sleeps"]) == 8
    for s in slept["sleeps"]:
        assert s["returned"] > 0
        # NVML sees the memory go while asleep, and come back on wake.
        assert abs((s["nvml_before"] - s["nvml_asleep"]) - s["returned"]) <= NVML_SLACK, s
        assert 0 < s["woken"] <= s["returned"]
        assert abs((s["nvml_awake"] - s["nvml_asleep"]) - s["woken"]) <= NVML_SLACK, s


def test_cuda_graph_captured_before_sleep_replays_after_wake():
    require("torch", "pynvml")
    r = run_workload("sleep_wake_graph.py")
    assert r["tagged_mapped"] >= 2048 * 2048 * 4
    assert r["returned"] == r["tagged_mapped"]
    assert abs(r["nvml_drop"] - r["returned"]) <= NVML_SLACK, r
    assert r["same_addresses"]
    assert r["replay_matches_eager"]
    assert r["replay_after_wake_same"]
    assert r["replay_new_input_matches_eager"]


def test_the_mem_pool_route_to_a_tag_runs_unchanged_after_use():
    require("torch", "pynvml")
    r = run_workload("tag_mem_pool_under_use.py")
    assert r["tag_in_use"] >= 64 * MiB and r["untagged_in_use"] < 64 * MiB, r
    assert r["slept"] >= 64 * MiB and r["nvml_drop"] >= 64 * MiB - NVML_SLACK, r
    assert r["contents_back"] and r["outside_intact"] == MiB, r
    assert r["counts"] == [2, 1] and r["pool_id"][0] == 0 and r["pool_id"][1] >= 1, r
    assert r["pool_live_is_cache"] and r["torch_pool_live_is_cache"] and r["all_has_both"], r


def test_a_tensor_shared_with_another_process_stays_awake_through_sleep_until_it_lets_go():
    require("torch")
    r = run_workload("sleep_shared.py")
    assert r["child_sum"] == 1000.0, r
    # The other tensor (64 MiB) slept; the shared one stayed mapped for the child.
    assert 64 * MiB <= r["slept_while_shared"] < 128 * MiB, r
    assert r["own_sum_after_wake"] == r["own_sum"], r
    assert r["child_reads_write_made_asleep"] == 5.5, r
    assert r["child_wrote"] and r["parent_reads_child_write"] == 6.5, r
    assert r["child_closed"] and r["released_by_child"], r
    assert r["slept_after"] >= 128 * MiB, r
    assert r["shared_after"] == [5.5, 6.5, 1.0], r
    assert r["child_exit"] == 0, r

"""PyTorch and CuPy on tidepool, on a real GPU: bit-identical results, exact release, memory shared
between the frameworks, retention, and out of memory across frameworks."""

import os

import pytest

from gpu_support import REPO_ROOT, require, run_workload

GiB = 1 << 30
MiB = 1 << 20


def test_torch_training_is_bit_identical_with_tidepool():
    require("torch")
    default = run_workload("torch_training.py", "default")
    routed = run_workload("torch_training.py", "tidepool")
    assert routed["tidepool_allocations"] > 0  # the run really went through tidepool
    assert routed["losses"] == default["losses"]
    assert routed["weights"] == default["weights"]


def test_torch_out_of_memory_path_compacts_only_when_asked():
    require("torch")
    on = run_workload("torch_oom_compact.py", "on")
    off = run_workload("torch_oom_compact.py", "off")
    for r in (on, off):
        # The request needs the granules live tensors leave untouched: more than the cap leaves.
        assert r["request"] > r["byte_cap"] - r["held_after_release"], r
        assert r["same_addresses"] and r["values_kept"], r
    assert on["served"] and on["recoveries"] >= 1, on
    assert on["held_at_end"] <= on["byte_cap"], on
    assert not off["served"], off  # off by default: out of memory (RuntimeError), nothing moved


def test_torch_optimizer_state_made_persistent_lands_apart_from_scratch():
    require("torch")
    r = run_workload("torch_optimizer_state.py")
    # AdamW's two moments per parameter (its step counts stay on the host), each in a persistent
    # block; the weights and the gradients, made outside the optimizer, in scratch ones.
    assert r["state_tensors"] == 2 * len(r["weights_persistent"]), r
    assert all(p is True for p in r["state_persistent"]), r
    assert all(p is False for p in r["weights_persistent"]), r
    assert r["gradient_persistent"] is False, r
    assert r["hint_after"] is False, r


def test_torch_compact_moves_live_tensors_and_hands_back_what_they_pinned():
    require("torch", "pynvml")
    r = run_workload("torch_compact.py")
    assert r["held_after_compact"] < r["held_after_release"], r  # live tensors pinned part of handles
    assert r["returned"] == r["held_after_release"] - r["held_after_compact"], r
    # The driver sees what compact() reports: exactly from the second call on; in the first, the
    # CUDA context may take up to one 2 MiB chunk for the stream the copies go on (H100: 2 MiB).
    assert r["returned"] - 2 * MiB <= r["nvml_drop"] <= r["returned"], r
    assert r["returned_again"] > 0 and r["nvml_drop_again"] == r["returned_again"], r
    assert r["values_kept_again"], r
    # What stays: the granules live tensors touch, and the capture's own few blocks.
    assert r["held_after_compact"] <= r["touched_granule_bytes"] + 8 * MiB + r["graph_output_bytes"], r
    assert r["same_addresses"] and r["values_kept"], r
    assert r["graph_reads_moved_bytes"], r


def test_torch_empty_cache_hands_back_what_tidepool_caches():
    require("torch")
    r = run_workload("torch_empty_cache.py")
    assert r["cached_before"] >= GiB, r
    assert r["released"] >= GiB, r
    assert r["in_use_after"] == r["in_use_before"], r
    assert r["kept_intact"], r
    assert r["replay_after_empty_cache_in_capture_right"], r


def test_torch_record_stream_keeps_a_tensor_from_reuse_until_the_recorded_stream_is_done():
    require("torch")
    unrecorded = run_workload("torch_record_stream.py", "unrecorded")
    # Without the call the same stream reuses the memory while the side stream has yet to read it,
    # and the side stream reads the new values: the hazard the test must see.
    assert unrecorded["side_busy_at_reuse"], unrecorded
    assert unrecorded["reused_at_once"], unrecorded
    assert not unrecorded["side_stream_read_what_it_was_given"], unrecorded
    r = run_workload("torch_record_stream.py", "recorded")
    assert r["side_busy_at_reuse"], r
    assert not r["reused_at_once"], r
    assert r["side_stream_read_what_it_was_given"], r


def test_cudnn_benchmark_set_by_the_program_trains_as_under_pytorchs_allocator():
    require("torch")
    unguarded = run_workload("torch_cudnn_benchmark.py", "unguarded")
    # Without use() PyTorch's benchmark stops at the first convolution: what use() is there for.
    assert unguarded["error"] is not None and "cacheInfo" in unguarded["error"], unguarded
    default = run_workload("torch_cudnn_benchmark.py", "default")
    r = run_workload("torch_cudnn_benchmark.py", "tidepool")
    assert r["error"] is None, r
    assert r["benchmark_read_back"] is False, r
    assert len(r["warnings"]) == 1 and "cacheInfo" in r["warnings"][0], r
    assert r["losses"] == default["losses"] and len(r["losses"]) == 8, (r, default)


@pytest.mark.parametrize("mode", ["default", "tidepool"])
def test_per_process_memory_fraction_caps_what_pytorch_allocates(mode):
    require("torch")
    r = run_workload("torch_memory_fraction.py", mode)
    # PyTorch's own allocator keeps the fraction as bytes and reads back their quotient
    # (0.07579999999290499 for 0.0758 on an 80 GB card); tidepool keeps the fraction itself.
    assert r["read_back"] == (pytest.approx(r["fraction"], rel=1e-6) if mode == "default" else r["fraction"]), r
    assert r["second_within_the_fraction"].startswith("CUDA out of memory."), r
    assert r["first_intact"] and r["second_after_lifting"], r
    assert r["read_back_after_lifting"] == 1.0, r
    if mode == "tidepool":
        assert r["byte_cap"] is None, r


def test_cuda_tensors_sent_through_torch_multiprocessing_arrive_over_the_senders_memory():
    # RL trainers send weights to rollout workers this way; PyTorch's pluggable interface refuses
    # it both ways: tidepool.torch.use() sends them through tidepool.share_memory, and maps what
    # PyTorch's own allocator sends (a cudaMalloc segment's cudaIpc handle, an expandable
    # segment's descriptors).
    require("torch")
    pairs = (("default", "default"), ("tidepool", "tidepool"), ("tidepool", "default"), ("default", "tidepool"),
             ("expandable", "tidepool"))
    r = {pair: run_workload("torch_ipc.py", *pair) for pair in pairs}
    print("tensors sent between processes:", r)
    for pair in pairs:
        figures = r[pair]
        assert all(ok is True for ok in figures["received_as_sent"].values()), figures
        assert figures["receiver_wrote"] and figures["sender_sees_receivers_write"], figures
        assert not figures["reused_while_received"] and figures["receiver_memory_intact"], figures
        assert figures["many_received"] and figures["receiver_released"], figures
        assert figures["receiver_exit"] == 0, figures
    for pair in (("tidepool", "tidepool"), ("tidepool", "default")):
        assert r[pair]["kept_while_received"] >= 1 and r[pair]["kept_after_release"] == 0, r[pair]
    for pair in (("default", "default"), ("default", "tidepool"), ("expandable", "tidepool")):
        # The receiver's release reached the sender's counters: its allocator freed the 1 GiB sent.
        assert r[pair]["freed_after_receiver_released_mib"] >= 1024, r[pair]


def test_cuda_tensors_reduced_and_pickled_reach_a_process_that_is_not_a_multiprocessing_child():
    # RL frameworks send reduce_tensor's result through Ray or ZeroMQ to processes with no
    # multiprocessing authkey in common: tidepool's share carries its own secret.
    require("torch")
    pairs = (("default", "default"), ("tidepool", "tidepool"), ("tidepool", "default"), ("default", "tidepool"))
    r = {pair: run_workload("torch_ipc_unrelated.py", *pair) for pair in pairs}
    print("reduced tensors through a file:", r)
    for pair, figures in r.items():
        assert "receiver_error" not in figures, figures
        assert figures["sums_as_sent"] and figures["sender_sees_receivers_write"], figures
        if pair[0] == "tidepool":
            assert figures["kept_after_receiver_exited"] == 0, figures
        else:  # the receiver's exit released its counters: the sender's allocator freed the 8 tensors
            assert figures["allocated_after_receiver_exited_mib"] < 16, figures


def test_a_cupy_array_shared_with_another_process_through_tidepool():
    require("cupy")
    r = run_workload("cupy_ipc.py")
    assert r["received"]["sum"] == r["expected_sum"] and r["received"]["bytes"] == (10 * MiB + 3) * 4, r
    assert r["child_wrote"] and r["parent_reads_write"], r
    assert r["kept_after_parent_dropped_it"] and not r["reused_while_shared"], r
    assert r["child_closed"] and r["dropped_after_child_closed"] and r["child_exit"] == 0, r


def test_torch_memory_statistics_answer_from_tidepool():
    require("torch")
    r = run_workload("torch_memory_stats.py")
    assert r["allocated"] == r["in_use"] >= 64 * MiB, r
    assert r["max_allocated"] == r["peak_in_use"] >= 576 * MiB, r
    assert r["reserved"] == r["mapped"], r
    assert 576 * MiB <= r["requested_peak"] < 600 * MiB, r
    assert r["max_allocated_after_reset"] == r["in_use_after_reset"] < 576 * MiB, r
    assert r["summary_first_line"].startswith("tidepool "), r
    assert r["counts_after_accumulated_reset"] == [1, 1, 1], r


def test_cupy_fft_and_elementwise_are_bit_identical_with_tidepool():
    require("cupy")
    default = run_workload("cupy_fft.py", "default")
    routed = run_workload("cupy_fft.py", "tidepool")
    assert routed["tidepool_allocations"] > 0
    assert routed["digests"] == default["digests"]


@pytest.mark.parametrize("mode", ["default", "tidepool"])
def test_release_hands_back_exactly_two_gib(mode):
    require("torch", "cupy", "pynvml")
    r = run_workload("release_scenario.py", mode)
    assert r["loaded"] - r["start"] >= 2 * GiB
    assert r["nvml_released"] == 2 * GiB
    assert r["released"] == 2 * GiB
    assert r["after"] == r["start"]


def test_cupy_streams_destroyed_while_their_arrays_live():
    require("cupy")
    r = run_workload("cupy_streams.py")
    assert r["rounds"] == 50
    assert r["live_allocations"] == 0
    assert r["released"] > 0


def test_memory_freed_by_torch_serves_cupy():
    require("torch", "cupy", "pynvml")
    r = run_workload("shared_memory.py")
    assert r["after_cupy"] == r["after_torch"]
    assert r["mapped_after_cupy"] == r["mapped_after_torch"]


def test_cupy_allocation_succeeds_by_emptying_torchs_cache():
    require("torch", "cupy")
    r = run_workload("cross_framework_oom.py")
    assert r["cupy_bytes"] > r["free_before"]
    assert r["torch_reserved_after"] == 0
    assert r["recoveries"] >= 1


@pytest.mark.parametrize("framework", ["cupy", "torch"])
def test_retention_workload(framework):
    require(framework, "pynvml")
    trace = os.path.join(REPO_ROOT, "traces", "loader.csv.gz")
    if not os.path.exists(trace):
        pytest.skip(f"{trace} is missing")
    default = run_workload("retention.py", framework, "default", trace, timeout=1200)
    routed = run_workload("retention.py", framework, "tidepool", trace, timeout=1200)
    for r in (default, routed):
        print(f"retention {r['framework']:<5} {r['allocator']:<8} peak held/peak live "
              f"{r['peak_ratio']:.3f} (peak live {r['peak_live'] / GiB:.2f} GiB), held after "
              f"release {r['held_after_release'] / GiB:.2f} GiB, after compact "
              f"{r['held_after'] / GiB:.2f} GiB for {r['live_after'] / GiB:.2f} GiB live; "
              f"allocating {r['allocating_s']:.3f} s, freeing {r['freeing_s']:.3f} s")
    print(f"retention {framework}: {routed['allocations_calling_driver']} of {routed['allocations']} "
          f"allocations made driver calls and took {routed['allocating_s_calling_driver']:.3f} s; the "
          f"pool's driver calls: {routed['pool_driver_calls']}, {routed['pool_driver_s']:.3f} s")
    # A figure, not a check (wall time is never asserted): issue 15 asks for at most 1.5x.
    own = default["allocating_s"] + default["freeing_s"]
    print(f"retention {framework}: tidepool's allocate + free time over the framework's own pool: "
          f"{(routed['allocating_s'] + routed['freeing_s']) / own:.2f}")
    # DESIGN 4: peak held / peak live <= 1.02; held after release and compact(): live rounded up
    # to 2 MiB pages (release() alone keeps the rest of each handle a live array touches).
    assert routed["peak_ratio"] <= 1.02
    assert routed["peak_ratio"] < default["peak_ratio"]
    assert routed["held_after"] <= routed["live_after"] * 1.02 + 64 * MiB
    assert routed["held_after"] <= routed["held_after_release"]


def test_torch_out_of_memory_is_caught_and_training_finishes_at_a_smaller_batch():
    require("torch")
    r = run_workload("oom_recovery.py", "torch")
    assert r["errors"], "the first batch fitted under the cap: nothing was tested"
    for error in r["errors"]:
        assert error["type"] == "RuntimeError"  # what PyTorch makes of the allocator's exception
        assert error["message"].startswith("CUDA out of memory. Tried to allocate ")
        assert "tidepool: out of memory on device 0" in error["message"]
    assert all(s == [0, 0] for s in r["stranded"])  # a failed step leaves nothing allocated
    assert r["batch"] < r["errors"][0]["batch"]
    assert len(r["losses"]) == 6 and r["finite"]


def test_cupy_out_of_memory_is_cupys_error_and_the_work_finishes_in_smaller_chunks():
    require("cupy")
    r = run_workload("oom_recovery.py", "cupy")
    assert r["errors"], "2 GiB fitted under a 1 GiB cap: nothing was tested"
    for error in r["errors"]:
        assert error["type"] == "OutOfMemoryError"  # cupy.cuda.memory.OutOfMemoryError
        assert error["cause"] == "OutOfMemoryError"  # tidepool.OutOfMemoryError, with the report
    assert all(s == [0, 0] for s in r["stranded"])
    assert r["sum"] == r["expected"] and r["kept_ok"]
    assert r["chunk_bytes"] < r["cap"]

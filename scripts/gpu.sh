#!/usr/bin/env bash
# Everything that needs a GPU, in one run (made for the lent H200 machine): builds tidepool with the
# PyTorch side-by-side benchmark, then runs the GPU tests (CTest label `gpu`), the driver-call and
# side-by-side benchmarks, the Python GPU tests (PyTorch, CuPy, NVML) and the replay of every bundled
# trace on the real GPU. Logs go to LOG_DIR (default: $OUT where set, else gpu-logs/). STEPS picks
# some of the steps (default: all): gpu-tests bench-vmm bench-compare python-gpu replay-cuda.
# More run only when STEPS names them: train-bench (bench/gpu/train/train_bench.py, the training
# loops under PyTorch default, expandable segments and tidepool: the first eight took ~9 minutes,
# the RL loop alone takes ~8 (three runs of 40 host-bound steps); TRAIN_WORKLOADS picks some, e.g.
# to stay within a 10-minute call), record-traces
# (bench/gpu/train/record_traces.py: those loops recorded as replay traces into LOG_DIR/traces),
# record-cost (the training loops under tidepool with and without TIDEPOOL_RECORD, ~4 minutes;
# each table ends with what the recording cost; RECORD_WORKLOADS picks some), and
# soak (the stress test, 8 threads x 4 streams under a byte cap, against the real driver, for
# SOAK_SECONDS, default 240, or SOAK_OPS operations per thread, default 1000000, whichever ends
# first; then every check, and a line of progress every 10 s in LOG_DIR/soak.txt) and
# thread-scaling (~70 s, ~85 s with two GPUs: bench/thread_scaling_bench on sim with the machine's
# cores, then `tidepool_compare_bench threads`: tidepool, cudaMallocAsync and PyTorch's allocator
# from 1-16 C++ threads on one GPU, and a cached allocation's latency beside another thread's 2 GiB
# allocation, then the pairs again with the threads spread over GPUs 0 and 1, and tidepool's
# thread caches per thread count; then bench/gpu/thread_scaling.py: tidepool beside PyTorch from
# Python threads on one and two GPUs; the two-GPU rows of both skipped, and said so, on a machine
# of one) and
# sleep-wake (bench/gpu/sleep_wake.py: sleep and wake of SLEEP_WAKE_GIB GiB of tensors, default
# "1 8 32", beside doing it by hand with plain PyTorch; issue 13) and
# kernel-speed (~2 minutes: bench/gpu/kernel_speed_bench, kernels over memory mapped in handles of
# each size against one cuMemAlloc, and beside virtual memory calls) and
# torch-call-cost (~50 s: bench/gpu/torch_call_cost.py, the host time of a PyTorch allocate + free
# pair under PyTorch default, expandable segments, tidepool, cudaMallocAsync natively and behind
# PyTorch's pluggable interface, each in its own process) and
# cupy-call-cost (~30 s: bench/gpu/cupy_call_cost.py, the host time of a CuPy allocate + free pair
# under CuPy's pool, tidepool.cupy.use() and tidepool's C functions set without the package's
# stream-passing wrapper) and
# capacity (~5 minutes: train_bench.py --memory-cap-gib, the training loops under the three
# allocators as on a smaller GPU, for each WORKLOAD:GiB of CAPACITY_RUNS, default "gpt-vary:13.5
# gpt-vary:14.2 hf-llama-train:19.5", about 1.05x, 1.10x and 1.03x their peak in use: which of them
# runs to the end there (a run that fails there is a finding: the step does not fail for it); sim's
# `tidepool replay --capacity` predicts it, docs/RESULTS.md).
# cupy-bench (~3 minutes: bench/gpu/cupy/cupy_bench.py, three CuPy programs that change shape as
# they run, a regridding spectral solver, k-means and batched linear algebra, under CuPy's pool,
# cudaMallocAsync and tidepool, each in its own process; CUPY_PROGRAMS picks some) and
# cupy-capacity (~1 minute: cupy_bench.py --memory-cap-gib, each PROGRAM:GiB of CUPY_CAPACITY_RUNS,
# default "spectral-regrid:5.32 spectral-regrid:5.57", 1.05x and 1.10x the solver's peak in use,
# under the three allocators, then tidepool again with compact_on_out_of_memory; a run that fails
# there is a finding, as in capacity).
# STEP_TIMEOUT (seconds, default none) stops any step that runs longer, so that a call with a time
# limit of its own still gets every log back (python-gpu alone can outlast a 10-minute call).
# PYTHON_GPU_TESTS (file names in python/tests/gpu, default all) splits python-gpu over calls, for a
# suite that outlasts one call (its times: docs/RESULTS.md, section 0, "On an H100 again").
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
logs=${LOG_DIR:-${OUT:-$root/gpu-logs}}
build=${BUILD_DIR:-/tmp/tidepool-gpu-build}
mkdir -p "$logs"
# The training benchmark's and torch_call_cost.py's `pluggable-async` runs load this library.
export TIDEPOOL_BENCH_PLUGGABLE_ASYNC=$build/bench/gpu/libtidepool_bench_pluggable_async.so
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/machine.txt"
torch_dir=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null)/Torch
{
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDEPOOL_WERROR=ON \
        -DTIDEPOOL_TORCH_BENCH=ON -DTorch_DIR="$torch_dir" &&
  cmake --build "$build" -j "$(nproc)"
} > "$logs/build.txt" 2>&1 || { tail -40 "$logs/build.txt"; exit 1; }
echo "built"
status=0
steps=" ${STEPS:-gpu-tests bench-vmm bench-compare python-gpu replay-cuda} "
step() {  # $1: log name; the rest: the command
  local name=$1; shift
  [[ $steps == *" $name "* ]] || return 0
  echo "=== $name: $*"
  timeout "${STEP_TIMEOUT:-0}" "$@" > "$logs/$name.txt" 2>&1; local rc=$?
  [ $rc -eq 124 ] && echo "=== $name: stopped after STEP_TIMEOUT=${STEP_TIMEOUT}s" >> "$logs/$name.txt"
  tail -25 "$logs/$name.txt"
  [ $rc -eq 0 ] || { echo "=== $name FAILED (rc $rc)"; status=1; }
}
step gpu-tests bash -c "cd '$build' && ctest -L gpu --output-on-failure -V --timeout 300"
step bench-vmm "$build/bench/gpu/tidepool_vmm_calls_bench"
step bench-compare "$build/bench/gpu/tidepool_compare_bench"
step kernel-speed "$build/bench/gpu/tidepool_kernel_speed_bench"
python_gpu_tests=()
for f in ${PYTHON_GPU_TESTS:-}; do python_gpu_tests+=("$root/python/tests/gpu/$f"); done
[ ${#python_gpu_tests[@]} -gt 0 ] || python_gpu_tests=("$root/python/tests/gpu")
step python-gpu env TIDEPOOL_LIBRARY="$build/src/libtidepool.so" PYTHONPATH="$root/python" PYTHONUNBUFFERED=1 \
  python3 -m pytest -q -s --durations=15 "${python_gpu_tests[@]}"
# The GPU machines' image has liblzma but not its headers, so the tool built there reads no xz:
# the xz traces are replayed from plain copies that Python's lzma makes (in the build folder, not
# in the logs: they are large).
plain_traces=()
if [[ $steps == *" replay-cuda "* ]]; then
  mkdir -p "$build/plain-traces"
  for trace in "$root"/traces/*.csv.xz; do
    plain="$build/plain-traces/$(basename "$trace" .xz)"
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$trace" "$plain" && plain_traces+=("$plain")
  done
fi
# The baselines that make one driver call per request (exact, cupy) take minutes on the recorded
# training loops on a real GPU; the sim replay (scripts/main.sh) has them.
step replay-cuda "$build/tools/tidepool" replay --device cuda --passes 2 --allocators tidepool,caching,expandable,async \
  "$root"/traces/*.csv.gz "${plain_traces[@]}"
step train-bench env TIDEPOOL_LIBRARY="$build/src/libtidepool.so" PYTHONUNBUFFERED=1 \
  python3 "$root/bench/gpu/train/train_bench.py" --log-dir "$logs" ${TRAIN_WORKLOADS:+--workloads "$TRAIN_WORKLOADS"}
step record-cost env TIDEPOOL_LIBRARY="$build/src/libtidepool.so" PYTHONUNBUFFERED=1 \
  python3 "$root/bench/gpu/train/train_bench.py" --allocators tidepool,tidepool+record \
  --workloads "${RECORD_WORKLOADS:-gpt-vary,gpt-small-vary,gpt-fixed,hf-llama-train,hf-llama-generate,timm-vit-train}" \
  --log-dir "$logs/record-cost"
step soak env TIDEPOOL_STRESS_OPS="${SOAK_OPS:-1000000}" TIDEPOOL_STRESS_SECONDS="${SOAK_SECONDS:-240}" \
  "$build/tests/gpu/tidepool_gpu_stress_test"
step thread-scaling bash -c "'$build/bench/thread_scaling_bench' --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true && '$build/bench/gpu/tidepool_compare_bench' threads 0.5 && \
  TIDEPOOL_LIBRARY='$build/src/libtidepool.so' PYTHONUNBUFFERED=1 \
  python3 '$root/bench/gpu/thread_scaling.py' --json '$logs/thread-scaling.json'"
step record-traces env PYTHONUNBUFFERED=1 python3 "$root/bench/gpu/train/record_traces.py" --out "$logs/traces"
step sleep-wake env TIDEPOOL_LIBRARY="$build/src/libtidepool.so" PYTHONPATH="$root/python" PYTHONUNBUFFERED=1 \
  python3 "$root/bench/gpu/sleep_wake.py" --sizes ${SLEEP_WAKE_GIB:-1 8 32} --json "$logs/sleep-wake.json"
step torch-call-cost bash -c "for a in default expandable tidepool async pluggable-async; do \
  TIDEPOOL_LIBRARY='$build/src/libtidepool.so' PYTHONUNBUFFERED=1 python3 '$root/bench/gpu/torch_call_cost.py' \$a \
  || exit 1; done"
step cupy-call-cost bash -c "for a in cupy tidepool tidepool-unrouted; do \
  TIDEPOOL_LIBRARY='$build/src/libtidepool.so' PYTHONUNBUFFERED=1 python3 '$root/bench/gpu/cupy_call_cost.py' \$a \
  || exit 1; done"
step capacity bash -c "for run in ${CAPACITY_RUNS:-gpt-vary:13.5 gpt-vary:14.2 hf-llama-train:19.5}; do \
  TIDEPOOL_LIBRARY='$build/src/libtidepool.so' PYTHONUNBUFFERED=1 python3 '$root/bench/gpu/train/train_bench.py' \
  --workloads \${run%%:*} --memory-cap-gib \${run##*:} --log-dir '$logs/capacity-'\${run/:/-}; done; true"
step cupy-bench env TIDEPOOL_LIBRARY="$build/src/libtidepool.so" PYTHONUNBUFFERED=1 \
  python3 "$root/bench/gpu/cupy/cupy_bench.py" --log-dir "$logs/cupy-bench" ${CUPY_PROGRAMS:+--programs "$CUPY_PROGRAMS"}
step cupy-capacity bash -c "for run in ${CUPY_CAPACITY_RUNS:-spectral-regrid:5.32 spectral-regrid:5.57}; do \
  for option in '' '--allocators tidepool --tidepool-option compact_on_out_of_memory=true'; do \
  TIDEPOOL_LIBRARY='$build/src/libtidepool.so' PYTHONUNBUFFERED=1 python3 '$root/bench/gpu/cupy/cupy_bench.py' \
  --programs \${run%%:*} --memory-cap-gib \${run##*:} \$option --log-dir '$logs/cupy-capacity-'\${run/:/-}\${option:+-compact}; \
  done; done; true"
exit $status

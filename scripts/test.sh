#!/usr/bin/env bash
# Every test: installs what is needed, builds tidepool twice (Release, then with AddressSanitizer
# and UndefinedBehaviorSanitizer), and runs the C++ suites (CTest) and the Python suite (pytest)
# on each (the long figure-asserting replay tests in the Release suite only, below). GPU tests
# (label `gpu`) skip themselves where there is no GPU. Then the tests labelled
# `cpu-threads` (threads, the process layer, the C API, the stress test) under ThreadSanitizer,
# and the libFuzzer targets (clang) for FUZZ_SECONDS (default 30) each.
# Each stage prints its time ("=== time NAME: N s").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
jobs=$(nproc)
timed() {  # $1: stage name; the rest: the command
  local name=$1 start=$SECONDS; shift
  "$@"
  echo "=== time $name: $((SECONDS - start)) s"
}

run_suite() {  # $1: build folder; the rest: CMake arguments
  local build=$1; shift
  echo "=== build $build ($*)"
  timed "build $(basename "$build")" env BUILD_DIR="$build" "$root/scripts/build.sh" "$@"
  echo "=== ctest $build"
  timed "ctest $(basename "$build")" bash -c "cd '$build' && ctest --output-on-failure -j $jobs --timeout 300 \
    ${CTEST_EXCLUDE:+-E '$CTEST_EXCLUDE'}"
  echo "=== pytest $build"
  # The wheel test (test_install.py) builds its library in build-wheel: once for both suites.
  # TIDEPOOL_REQUIRE_BROWSER: the browser test of `tidepool view` runs here, never skips.
  timed "pytest $(basename "$build")" env TIDEPOOL_LIBRARY="$(ls "$build"/src/libtidepool.so)" TIDEPOOL_DEVICE=sim \
    TIDEPOOL_TEST_WHEEL_BUILD_DIR="$root/build-wheel" TIDEPOOL_REQUIRE_BROWSER=1 \
    PYTHONPATH="$root/python" LD_PRELOAD="${PRELOAD:-}" \
    /usr/bin/python3 -m pytest -q "$root/python/tests"
}

run_suite "$root/build" -DCMAKE_BUILD_TYPE=Release
# The replay tests that assert a recorded loop's figures over several passes or near the device's
# capacity (ReplayNearCapacity, ReplayLaterPasses, ReplayAliases) run in the Release suite only:
# unoptimized under the sanitizers they took most of that suite's test time, and the pool code they
# drive runs under the sanitizers in the unit, stress and fault-sweep tests, the shorter replay
# tests and the fuzzers (docs/RESULTS.md, "Each row's history", the suite's fiftieth session).
# The sanitizer runtime must come first in a Python process that loads the library.
CTEST_EXCLUDE='^Replay(NearCapacity|LaterPasses|Aliases)[.]' \
PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libubsan.so)" \
ASAN_OPTIONS=detect_leaks=0 \
  run_suite "$root/build-sanitize" -DCMAKE_BUILD_TYPE=Debug -DTIDEPOOL_SANITIZE=ON -DTIDEPOOL_BUILD_BENCH=OFF

# ThreadSanitizer cannot share a process with AddressSanitizer: a build of its own, of the tests
# labelled `cpu-threads` only (target tidepool_threads_tests).
tsan=$root/build-tsan
echo "=== build $tsan (ThreadSanitizer)"
timed "build build-tsan" bash -c "cmake -S '$root' -B '$tsan' -G Ninja -DTIDEPOOL_WERROR=ON -DCMAKE_BUILD_TYPE=Debug \
  -DTIDEPOOL_SANITIZE_THREAD=ON -DTIDEPOOL_BUILD_BENCH=OFF >/dev/null && cmake --build '$tsan' -j $jobs --target tidepool_threads_tests"
echo "=== ctest $tsan -L threads"
timed "ctest build-tsan" bash -c "cd '$tsan' && TSAN_OPTIONS='halt_on_error=1 second_deadlock_stack=1' \
  ctest -L threads --output-on-failure -j $jobs --timeout 600"

# libFuzzer (clang, a build of its own): every input that once crashed (tests/fuzz/regression/)
# runs once, then each target fuzzes for FUZZ_SECONDS from its seed corpus (tests/fuzz/corpus/;
# what it finds goes to build-fuzz/corpus/, never into the committed seeds).
fuzz=$root/build-fuzz
echo "=== build $fuzz (libFuzzer)"
# Its layers are built without precompiled headers: the check that each of their files includes
# what it uses, which the other builds' shared headers would hide (cmake/precompiled_headers.cmake).
timed "build build-fuzz" bash -c "CC=clang CXX=clang++ cmake -S '$root' -B '$fuzz' -G Ninja -DTIDEPOOL_WERROR=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTIDEPOOL_FUZZ=ON -DTIDEPOOL_BUILD_TESTS=OFF -DTIDEPOOL_BUILD_BENCH=OFF \
  -DTIDEPOOL_PRECOMPILED_HEADERS=OFF >/dev/null &&
  cmake --build '$fuzz' -j $jobs --target fuzz_trace_reader fuzz_pool_calls"
for target in trace_reader pool_calls; do
  mkdir -p "$fuzz/corpus/$target"
  regression=("$root/tests/fuzz/regression/$target"/*)
  if [ -e "${regression[0]}" ]; then
    timed "fuzz regression $target" "$fuzz/tests/fuzz/fuzz_$target" "${regression[@]}"
  fi
  timed "fuzz $target" "$fuzz/tests/fuzz/fuzz_$target" -max_total_time="${FUZZ_SECONDS:-30}" -print_final_stats=1 \
    -artifact_prefix="$fuzz/" "$fuzz/corpus/$target" "$root/tests/fuzz/corpus/$target"
done

#!/usr/bin/env bash
# Every test: installs what is needed, builds tidepool twice (Release, then with AddressSanitizer
# and UndefinedBehaviorSanitizer), and runs the C++ suites (CTest) and the Python suite (pytest)
# on each. GPU tests (label `gpu`) skip themselves where there is no GPU. Then the tests labelled
# `cpu-threads` (threads, the process layer, the C API, the stress test) under ThreadSanitizer.
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
  timed "ctest $(basename "$build")" bash -c "cd '$build' && ctest --output-on-failure -j $jobs --timeout 300"
  echo "=== pytest $build"
  timed "pytest $(basename "$build")" env TIDEPOOL_LIBRARY="$(ls "$build"/src/libtidepool.so)" TIDEPOOL_DEVICE=sim \
    PYTHONPATH="$root/python" LD_PRELOAD="${PRELOAD:-}" \
    /usr/bin/python3 -m pytest -q "$root/python/tests"
}

run_suite "$root/build" -DCMAKE_BUILD_TYPE=Release
# The sanitizer runtime must come first in a Python process that loads the library.
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

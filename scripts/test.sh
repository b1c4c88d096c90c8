#!/usr/bin/env bash
# Every test: installs what is needed, builds tidepool twice (Release, then with AddressSanitizer
# and UndefinedBehaviorSanitizer), and runs the C++ suites (CTest) and the Python suite (pytest)
# on each. GPU tests (label `gpu`) skip themselves where there is no GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
jobs=$(nproc)

run_suite() {  # $1: build folder; the rest: CMake arguments
  local build=$1; shift
  echo "=== build $build ($*)"
  BUILD_DIR=$build "$root/scripts/build.sh" "$@"
  echo "=== ctest $build"
  (cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 300)
  echo "=== pytest $build"
  # TIDEPOOL_REQUIRE_BROWSER: the browser test of `tidepool view` runs here, never skips.
  TIDEPOOL_LIBRARY=$(ls "$build"/src/libtidepool.so) TIDEPOOL_DEVICE=sim TIDEPOOL_REQUIRE_BROWSER=1 \
    PYTHONPATH="$root/python" LD_PRELOAD="${PRELOAD:-}" \
    /usr/bin/python3 -m pytest -q "$root/python/tests"
}

run_suite "$root/build" -DCMAKE_BUILD_TYPE=Release
# The sanitizer runtime must come first in a Python process that loads the library.
PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libubsan.so)" \
ASAN_OPTIONS=detect_leaks=0 \
  run_suite "$root/build-sanitize" -DCMAKE_BUILD_TYPE=Debug -DTIDEPOOL_SANITIZE=ON -DTIDEPOOL_BUILD_BENCH=OFF

#!/usr/bin/env bash
# Configures and builds tidepool into BUILD_DIR (default: build). Extra arguments go to CMake.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DTIDEPOOL_WERROR=ON "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"

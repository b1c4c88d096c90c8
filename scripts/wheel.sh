#!/usr/bin/env bash
# Builds the tidepool wheel: the Python package with libtidepool.so inside, built by CMake
# (python/setup.py). Offline on Debian: setuptools and wheel come from python3-setuptools and
# python3-wheel (scripts/deps.sh), hence --no-build-isolation.
#   scripts/wheel.sh                  -> dist/tidepool-<version>-py3-none-<platform>.whl
#   WHEEL_DIR=out BUILD_DIR=b scripts/wheel.sh   (BUILD_DIR: the CMake folder, default build-wheel)
# Install it anywhere: python3 -m venv --system-site-packages env && env/bin/pip install dist/*.whl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-/usr/bin/python3}
out=${WHEEL_DIR:-$root/dist}
export TIDEPOOL_CMAKE_BUILD_DIR=${BUILD_DIR:-$root/build-wheel}
mkdir -p "$out"
"$python" -m pip wheel --no-build-isolation --no-deps --wheel-dir "$out" "$root/python"

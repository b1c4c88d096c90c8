#!/usr/bin/env bash
# Installs what tidepool builds and tests with, from Debian's packages. Idempotent: packages
# already present are not fetched again, and apt's lists are refreshed only when something is missing.
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config zlib1g-dev liblzma-dev libgtest-dev libgmock-dev libbenchmark-dev
          libcli11-dev nlohmann-json3-dev libfmt-dev python3 python3-pytest python3-pip python3-setuptools
          python3-wheel python3-venv clang libclang-rt-dev chromium)  # chromium: the headless browser that tests `tidepool view`'s page
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

#!/usr/bin/env bash
# The main job: installs what is needed, builds tidepool, and replays every bundled trace on the
# simulated H200, printing tidepool beside the allocators users have today.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/build.sh" -DCMAKE_BUILD_TYPE=Release
exec "$root/build/tools/tidepool" replay "$root"/traces/*.csv.gz "$@"

#!/usr/bin/env bash
# The main job: installs what is needed, builds tidepool, and replays every bundled trace on the
# simulated H200, printing tidepool beside the allocators users have today, and writes the same as
# one HTML page of charts and tables (`tidepool view`): $REPORT, else $OUT/report.html, else
# build/report.html. Extra arguments go to `tidepool view` (e.g. --passes 3).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/build.sh" -DCMAKE_BUILD_TYPE=Release
report=${REPORT:-${OUT:-$root/build}/report.html}
mkdir -p "$(dirname "$report")"
exec "$root/build/tools/tidepool" view "$root"/traces/*.csv.gz -o "$report" "$@"

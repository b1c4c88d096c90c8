#!/usr/bin/env bash
# Issue 14 figures on sim: the request round trip (tidepool trim to an idle process with nothing
# cached) and an allocation that gets a neighbour's 768 MiB cache. Run from the repository root after building
# build/tools/tidepool and build/tests/process/sharing_helper.
set -euo pipefail
D=$(mktemp -d)
export TIDEPOOL_DEVICE=sim TIDEPOOL_SIM_CAPACITY=1GiB TIDEPOOL_SIM_SHARED=$D TIDEPOOL_SIM_UUID=measure TIDEPOOL_LEDGER_DIR=$D
stats() { sort -n | awk '{a[NR]=$1} END{printf "n=%d min=%.3f median=%.3f p90=%.3f max=%.3f\n", NR, a[1], a[int((NR+1)/2)], a[int(NR*0.9+0.5)], a[NR]}'; }
holder() {  # LIVE CACHED: starts a holder; sets P and keeps its stdin open on fd 3
  mkfifo $D/in.$1.$2; build/tests/process/sharing_helper hold $1 $2 < $D/in.$1.$2 > $D/out.$1.$2 & exec 3>$D/in.$1.$2
  until grep -q ready $D/out.$1.$2 2>/dev/null; do sleep 0.05; done; P=$(awk '/ready/{print $2}' $D/out.$1.$2)
}
holder 2097152 0
echo -n "trim round trip, idle process with nothing cached (ms): "
for i in $(seq 1 50); do build/tools/tidepool trim --pid $P 1; done | awk '{print $(NF-1)}' | stats
exec 3>&-; wait
echo -n "allocation of 512 MiB that gets a neighbour's 768 MiB cache (ms): "
for i in $(seq 1 20); do
  holder 0 805306368
  build/tests/process/sharing_helper allocate 536870912 | awk '{print $2/1000}'
  exec 3>&-; wait; rm -f $D/in.* $D/out.*
done | stats
echo -n "the same allocation with room on the GPU, no neighbour (ms): "
for i in $(seq 1 20); do build/tests/process/sharing_helper allocate 536870912 | awk '{print $2/1000}'; done | stats
rm -rf $D

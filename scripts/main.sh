#!/usr/bin/env bash
# The main job: installs what is needed, builds tidepool, and replays every bundled trace on the
# simulated H200, printing tidepool beside the allocators users have today, and writes the same as
# one HTML page of charts and tables (`tidepool view`): $REPORT, else $OUT/report.html, else
# build/report.html. Extra arguments go to `tidepool view` (e.g. --passes 3). Then the same traces
# with the experimental option alias_free_handles, one line each, and on a simulated GPU only a
# tenth larger than each trace's peak in use (a program whose batch was sized to its GPU), beside
# expandable segments: failed allocations and the driver calls of the steady state.
# Then workloads the pool was not tuned on: the loader generated with seeds 2-10 and the synthetic
# traces of bench/synthetic/make_traces.py (MoE, serving, random mix, checkpointed training, RL,
# data-parallel with a communication stream, fully sharded data-parallel on three streams, two
# loops side by side on two streams, GNN, U-Net, a regridding science code, a transformer with a
# larger-batch evaluation every tenth step, a transformer on a curriculum, a pipeline-parallel
# stage on the 1F1B schedule, a Newton-Krylov science code, an encoder served with dynamic batching,
# training with its activations offloaded to the host, a server of many LoRA adapters) with seeds
# 1-10, each
# replayed three times beside expandable segments, one line each and the goals over all
# of them; then the bundled and the generated traces again with the GPU 50 ms behind the program, as
# a GPU-bound loop runs (a freed block is reusable on other streams only once its stream's work is
# done, under PyTorch's allocator too), beside expandable segments
# (UNSEEN_SEEDS="1 2 3" picks fewer seeds; UNSEEN_SEEDS= skips the part).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/build.sh" -DCMAKE_BUILD_TYPE=Release
report=${REPORT:-${OUT:-$root/build}/report.html}
mkdir -p "$(dirname "$report")"
tool="$root/build/tools/tidepool"
"$tool" view "$root"/traces/*.csv.{gz,xz} -o "$report" "$@"
echo
echo "=== The experimental option alias_free_handles (replay --alias) on the bundled traces, beside expandable segments"
"$tool" replay "$root"/traces/*.csv.{gz,xz} --allocators tidepool,expandable --passes 3 --brief --alias
echo
echo "=== On a GPU a tenth larger than each trace's peak in use (replay --capacity 1.10x), beside expandable segments"
"$tool" replay "$root"/traces/*.csv.{gz,xz} --allocators tidepool,expandable --passes 3 --brief --capacity 1.10x

seeds=${UNSEEN_SEEDS-1 2 3 4 5 6 7 8 9 10}
[ -n "$seeds" ] || exit 0
unseen=$(mktemp -d)
trap 'rm -rf "$unseen"' EXIT
for seed in $seeds; do
  [ "$seed" = 1 ] || "$tool" generate-loader "$unseen/loader_$seed.csv.gz" --seed "$seed" > /dev/null
  python3 "$root/bench/synthetic/make_traces.py" "$unseen/$seed" "$seed" > /dev/null
  for trace in "$unseen/$seed"/*.csv.gz; do kind=$(basename "$trace" .csv.gz); mv "$trace" "$unseen/${kind}_$seed.csv.gz"; done
done
echo
echo "=== Workloads tidepool was not tuned on (seeds: $seeds; the loader's seed 1 is the bundled trace)"
"$tool" replay "$unseen"/*.csv.gz --allocators tidepool,expandable --passes 3 --brief
echo
echo "=== The bundled traces and those workloads with the GPU 50 ms behind the program (replay --gpu-lag-ms 50), beside expandable segments"
"$tool" replay "$root"/traces/*.csv.{gz,xz} "$unseen"/*.csv.gz --allocators tidepool,expandable --passes 3 --brief --gpu-lag-ms 50

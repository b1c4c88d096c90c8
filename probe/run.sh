set -x
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/cmake.log 2>&1 || tail -30 $OUT/cmake.log
time cmake --build build-gpu --target tidepool > $OUT/build.log 2>&1 || tail -30 $OUT/build.log
export TIDEPOOL_LIBRARY=$PWD/build-gpu/src/libtidepool.so PYTHONPATH=$PWD/python
for m in "default global" "tidepool global" "tidepool thread_local" "tidepool relaxed"; do
  timeout 120 python3 probe/graph_probe.py $m 2>&1 | tail -15
done

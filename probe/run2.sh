cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/cmake.log 2>&1 || tail -30 $OUT/cmake.log
cmake --build build-gpu --target tidepool > $OUT/build.log 2>&1 || tail -30 $OUT/build.log
export TIDEPOOL_LIBRARY=$PWD/build-gpu/src/libtidepool.so PYTHONPATH=$PWD/python
for m in default tidepool; do for s in none release free_output free_output_release; do
  timeout 120 python3 probe/graph_probe2.py $m $s 2>&1 | tail -5
done; done

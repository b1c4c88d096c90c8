// tests/install/consumer/consumer.cpp: the C++ API from an installed tidepool. A pool of its own
// on a sim_driver, the process's pool (TIDEPOOL_DEVICE=sim), and an error that keeps the pool
// whole; prints one "key value" line per figure for check_install.py, and exits 1 on any surprise.
#include <cstdio>
#include <exception>
#include <memory>

#include <tidepool/tidepool.hpp>

int main() try {
  tidepool::pool pool(std::make_shared<tidepool::sim_driver>(), /*device=*/0);
  void* p = pool.allocate(64 << 20);
  const std::size_t size = pool.allocation_size(p);
  pool.deallocate(p);
  bool refused = false;
  try {
    pool.deallocate(p);  // a double free: an error, and the pool as it was
  } catch (const tidepool::error& e) {
    refused = e.code() == tidepool::error_code::double_free;
  }
  const std::size_t released = pool.release();

  tidepool::pool& shared = tidepool::device_pool(0);
  void* q = shared.allocate(1 << 20);
  shared.deallocate(q);

  std::printf("size %zu\nrefused %d\nreleased %zu\nshared_driver %s\nshared_allocations %llu\n", size,
              refused ? 1 : 0, released, shared.get_driver()->name().c_str(),
              static_cast<unsigned long long>(shared.stats().allocations));
  return size == (64u << 20) && refused && shared.stats().live_allocations == 0 ? 0 : 1;
} catch (const std::exception& e) {  // e.g. no GPU and TIDEPOOL_DEVICE unset
  std::fprintf(stderr, "cxx_consumer: %s\n", e.what());
  return 1;
}

// sharing_helper: one tidepool process on a (simulated, shared) GPU for sharing_test.cpp, through
// the C API of libtidepool.so, as a program would use it.
//   sharing_helper hold LIVE CACHED [HOOK_SLEEP_MS]
//     allocates LIVE bytes and keeps them, allocates CACHED bytes and frees them (they stay in
//     the pool's cache), prints "ready", then serves the others' requests until stdin closes; then
//     checks that its live allocations are still its own and prints "intact" (exit 0) or "lost".
//     With HOOK_SLEEP_MS, a reclaim hook prints "serving" and sleeps that long (a request in
//     progress, for tests that kill a process meanwhile).
//   sharing_helper allocate BYTES
//     after a first allocation of 2 MiB (the pool made, the ledger joined), one allocation of
//     BYTES on device 0: prints "ok MICROSECONDS" (exit 0) or "oom ..." (exit 3).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tidepool/c_api.h"

namespace {

constexpr std::size_t chunk = std::size_t{64} << 20;
unsigned long hook_sleep_ms = 0;

std::size_t slow_hook(int, std::size_t, void*) {
  std::printf("serving\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(hook_sleep_ms));
  return 0;
}

std::vector<void*> allocate_in_chunks(std::size_t bytes) {
  std::vector<void*> blocks;
  for (std::size_t done = 0; done < bytes; done += chunk) {
    void* p = nullptr;
    if (tidepool_allocate(std::min(chunk, bytes - done), 0, nullptr, TIDEPOOL_SCRATCH, &p) != TIDEPOOL_SUCCESS) {
      std::printf("failed %s\n", tidepool_last_error());
      std::exit(5);
    }
    blocks.push_back(p);
  }
  return blocks;
}

int hold(std::size_t live, std::size_t cached) {
  if (hook_sleep_ms > 0) {
    int id = 0;
    if (tidepool_add_reclaim_hook(slow_hook, nullptr, &id) != TIDEPOOL_SUCCESS) return 6;
  }
  const std::vector<void*> kept = allocate_in_chunks(live);
  for (void* p : allocate_in_chunks(cached)) (void)tidepool_deallocate(p, 0, nullptr);
  std::printf("ready %d\n", static_cast<int>(::getpid()));
  std::fflush(stdout);
  char c = 0;
  while (::read(0, &c, 1) > 0) {
  }
  // Every live block is still live, as allocated: none was handed to another process.
  tidepool_stats_t stats{};
  stats.struct_size = sizeof stats;
  if (tidepool_stats(0, &stats) != TIDEPOOL_SUCCESS) return 7;
  bool intact = stats.live_allocations == kept.size() && stats.in_use_bytes >= live;
  for (void* p : kept) intact = intact && tidepool_deallocate(p, 0, nullptr) == TIDEPOOL_SUCCESS;
  std::printf("%s live=%llu in_use=%llu\n", intact ? "intact" : "lost",
              static_cast<unsigned long long>(stats.live_allocations),
              static_cast<unsigned long long>(stats.in_use_bytes));
  std::fflush(stdout);
  return intact ? 0 : 4;
}

int allocate(std::size_t bytes) {
  // A first small allocation makes the pool and joins the ledger, so the time below is the
  // allocation's own (out-of-memory path and asking included).
  void* first = nullptr;
  if (tidepool_allocate(std::size_t{2} << 20, 0, nullptr, TIDEPOOL_SCRATCH, &first) != TIDEPOOL_SUCCESS) {
    std::printf("failed %s\n", tidepool_last_error());
    return 5;
  }
  void* p = nullptr;
  const auto start = std::chrono::steady_clock::now();
  const tidepool_status status = tidepool_allocate(bytes, 0, nullptr, TIDEPOOL_SCRATCH, &p);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  if (status == TIDEPOOL_SUCCESS) {
    std::printf("ok %.1f\n", us);
    std::fflush(stdout);
    return 0;
  }
  std::printf("oom %.1f %s\n", us, tidepool_last_error());
  std::fflush(stdout);
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "hold" && (argc == 4 || argc == 5)) {
    if (argc == 5) hook_sleep_ms = std::strtoul(argv[4], nullptr, 10);
    return hold(std::strtoull(argv[2], nullptr, 10), std::strtoull(argv[3], nullptr, 10));
  }
  if (mode == "allocate" && argc == 3) return allocate(std::strtoull(argv[2], nullptr, 10));
  std::fprintf(stderr, "usage: sharing_helper hold LIVE CACHED [HOOK_SLEEP_MS] | allocate BYTES\n");
  return 2;
}

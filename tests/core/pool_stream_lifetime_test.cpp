// Streams that come and go: a stream destroyed by the program (CuPy destroys streams when they are
// collected), the per-thread default stream (one stream per thread behind one handle), a handle
// that names a new stream after the old one was destroyed, and the per-stream slots of streams the
// pool no longer needs.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

#include "pool_checker.hpp"

namespace tidepool::testing {
namespace {

const auto per_thread_stream = reinterpret_cast<stream_t>(std::uintptr_t{2});  // CU_STREAM_PER_THREAD

stream_t new_stream(sim_driver& sim) {
  stream_t s = nullptr;
  EXPECT_EQ(sim.stream_create(0, &s), driver_status::success);
  return s;
}

// A miss after a stream was destroyed must not touch the destroyed stream (on CUDA, recording an
// event on it is a use after free): it works, and so does every later one.
TEST(PoolStreamLifetime, MissesWorkAfterAStreamIsDestroyed) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  const stream_t s = new_stream(*sim);
  const stream_t t = new_stream(*sim);
  void* x = checker.allocate(8 * MiB, s);
  checker.free(x);
  ASSERT_EQ(sim->stream_destroy(0, s), driver_status::success);
  void* big = checker.allocate(64 * MiB, t);  // a miss
  void* more = checker.allocate(32 * MiB, t);  // and another
  checker.check();
  checker.free(big);
  checker.free(more);
  const std::size_t held = p.stats().mapped_bytes;
  EXPECT_EQ(p.release(), held) << "the destroyed stream's free goes back too";
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
  checker.check();
}

// The same with work still queued on the stream when it is destroyed: its memory reaches the other
// stream once that work is done, with no call naming the destroyed stream.
TEST(PoolStreamLifetime, MemoryOfADestroyedStreamReachesOthersOnceItsWorkIsDone) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  const stream_t s = new_stream(*sim);
  const stream_t t = new_stream(*sim);
  void* x = checker.allocate(8 * MiB, s);
  checker.free_after_work(x, 500.0);
  ASSERT_EQ(sim->stream_destroy(0, s), driver_status::success);
  void* early = checker.allocate(8 * MiB, t);  // s's work is queued: not x
  EXPECT_NE(early, x);
  sim->advance(600.0);
  void* later = checker.allocate(8 * MiB, t);
  EXPECT_EQ(later, x) << "once the destroyed stream's work is done its free serves other streams";
  checker.check();
  checker.free(early);
  checker.free(later);
  EXPECT_EQ(p.stats().driver.of(driver_call::device_synchronize), 0u) << "no device-wide wait was needed";
}

// CU_STREAM_PER_THREAD names the calling thread's own stream: a block freed there by one thread
// must not go at once to another thread whose stream is not ordered after the first's work.
TEST(PoolStreamLifetime, PerThreadDefaultStreamIsOneStreamPerThread) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0);
  void* x = nullptr;
  std::thread first([&] {
    x = p.allocate(2 * MiB, per_thread_stream);
    sim->launch(0, per_thread_stream, 1000.0, reinterpret_cast<device_address>(x), 2 * MiB);
    p.deallocate(x, per_thread_stream);
    void* again = p.allocate(2 * MiB, per_thread_stream);  // the same thread's stream: reused at once
    EXPECT_EQ(again, x);
    p.deallocate(again, per_thread_stream);
  });
  first.join();
  void* y = nullptr;
  std::thread second([&] { y = p.allocate(2 * MiB, per_thread_stream); });
  second.join();
  EXPECT_NE(y, x) << "another thread's per-thread stream got a block the first thread's work still uses";
  p.deallocate(y, per_thread_stream);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

// CUDA may give a destroyed stream's handle to a new stream. The pool cannot see that by itself
// (recognizing the stream would cost a driver call on every allocation), so the program, or the
// front end that destroys streams, tells it: then the new stream starts with nothing of the old
// one's, and the old stream's free waits for its own work.
TEST(PoolStreamLifetime, AForgottenHandleNamesANewStreamAfresh) {
  sim_config config = small_device(256 * MiB);
  config.reuse_stream_handles = true;
  auto sim = std::make_shared<sim_driver>(config);
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  const stream_t old_stream = new_stream(*sim);
  void* x = checker.allocate(8 * MiB, old_stream);
  checker.free_after_work(x, 500.0);
  ASSERT_EQ(sim->stream_destroy(0, old_stream), driver_status::success);
  p.forget_stream(old_stream);
  const stream_t reborn = new_stream(*sim);
  ASSERT_EQ(reborn, old_stream);
  void* y = p.allocate(8 * MiB, reborn);
  EXPECT_NE(y, x) << "the new stream got a block the destroyed stream's work still uses";
  sim->advance(600.0);
  void* z = p.allocate(8 * MiB, reborn);
  EXPECT_EQ(z, x) << "once that work is done, the block serves any stream";
  p.deallocate(y, reborn);
  p.deallocate(z, reborn);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

// A garbage collector may free memory after the stream it was allocated on was destroyed and
// forgotten: the free names that stream, and the pool makes no driver call with the handle.
TEST(PoolStreamLifetime, FreeOnAForgottenStreamNamesNoHandle) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0);
  const stream_t s = new_stream(*sim);
  const stream_t t = new_stream(*sim);
  void* x = p.allocate(8 * MiB, s);
  void* kept = p.allocate(4 * MiB, s);
  sim->launch(0, s, 500.0, reinterpret_cast<device_address>(x), 8 * MiB);
  p.deallocate(kept, s);                  // records the stream's event while it is alive
  sim->advance(600.0);
  void* other = p.allocate(64 * MiB, t);  // a slow path settles it: s's next free would record
  ASSERT_EQ(sim->stream_destroy(0, s), driver_status::success);
  p.forget_stream(s);
  const driver_call_counts before = sim->call_counts();
  p.deallocate(x, s);  // after the destruction (sim refuses any call naming s)
  EXPECT_EQ(sim->call_counts().of(driver_call::event_record), before.of(driver_call::event_record));
  p.deallocate(other, t);
  const std::size_t held = p.stats().mapped_bytes;
  EXPECT_EQ(p.release(), held) << "the forgotten stream's free goes back after a device-wide wait";
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

// Every stream ever seen used to keep a slot in each of the six arenas, visited on every slow
// path. Streams that hold nothing give their slot back.
TEST(PoolStreamLifetime, SlotsOfStreamsThatHoldNothingAreRecycled) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0);
  pool_checker checker(*sim, p);
  const stream_t main_stream = new_stream(*sim);
  void* keep = checker.allocate(1 * MiB, main_stream);
  for (int i = 0; i < 300; ++i) {
    const stream_t s = new_stream(*sim);
    void* x = checker.allocate((1 + i % 8) * MiB, s);
    checker.free_after_work(x, 10.0);
    ASSERT_EQ(sim->stream_destroy(0, s), driver_status::success);
    if (i % 3 == 0) p.forget_stream(s);  // whether told or not, the slot comes back
    sim->advance(20.0);
    if (i % 10 == 0) {
      void* big = checker.allocate(40 * MiB, main_stream);  // a slow path now and then
      checker.free(big);
    }
  }
  void* last = checker.allocate(64 * MiB, main_stream);  // a miss settles and recycles
  EXPECT_LE(p.stats().streams, 3u) << "streams that hold nothing keep their slots";
  checker.check();
  checker.free(last);
  checker.free(keep);
}

// A block allocated on one thread's per-thread stream and freed with CU_STREAM_PER_THREAD from
// another thread (a garbage collector there, or a front end passing the allocation's stream): the
// work that used it is on the first thread's stream, so the second thread must not reuse it at
// once, and nothing records on the first thread's stream from the second.
TEST(PoolStreamLifetime, PerThreadStreamBlockFreedFromAnotherThread) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0);
  void* x = nullptr;
  std::thread first([&] {
    x = p.allocate(2 * MiB, per_thread_stream);
    sim->launch(0, per_thread_stream, 1000.0, reinterpret_cast<device_address>(x), 2 * MiB);
  });
  first.join();
  void* y = nullptr;
  std::thread second([&] {
    p.deallocate(x, per_thread_stream);
    y = p.allocate(2 * MiB, per_thread_stream);
  });
  second.join();
  EXPECT_NE(y, x) << "the freeing thread reused a block the first thread's work still uses";
  p.deallocate(y, per_thread_stream);
  const std::size_t held = p.stats().mapped_bytes;
  EXPECT_EQ(p.release(), held);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

// A program that allocates on a stream it destroyed (and did not forget) gets a clear error where
// the pool can tell, and the pool is left as it was.
TEST(PoolStreamLifetime, AllocationOnADestroyedStreamIsRefused) {
  auto sim = std::make_shared<sim_driver>(small_device(256 * MiB));
  pool p(sim, 0);
  const stream_t s = new_stream(*sim);
  const stream_t t = new_stream(*sim);
  void* a = p.allocate(2 * MiB, s);
  void* b = p.allocate(2 * MiB, s);
  void* c = p.allocate(2 * MiB, s);
  for (void* ptr : {a, b, c}) p.deallocate(ptr, s);  // an event, the later frees uncovered
  void* other = p.allocate(64 * MiB, t);             // a miss settles the events
  ASSERT_EQ(sim->stream_destroy(0, s), driver_status::success);
  const pool_stats before = p.stats();
  try {
    (void)p.allocate(2 * MiB, s);
    ADD_FAILURE() << "an allocation on a destroyed stream succeeded";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), error_code::invalid_stream) << e.what();
    EXPECT_NE(std::string(e.what()).find("destroyed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(p.stats().live_allocations, before.live_allocations);
  EXPECT_EQ(p.stats().mapped_bytes, before.mapped_bytes);
  p.forget_stream(s);
  EXPECT_THROW((void)p.allocate(2 * MiB, s), error) << "a forgotten, destroyed stream is unknown to the driver";
  p.deallocate(other, t);
  EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
}

}  // namespace
}  // namespace tidepool::testing

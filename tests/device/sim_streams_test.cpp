// Streams and events on the simulated GPU's logical clock: ordering across streams, waits,
// synchronization, and mem_free waiting for all of a device's queued work.
#include <gtest/gtest.h>

#include <thread>

#include "device/sim_test_support.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::test {
namespace {

struct SimStreams : ::testing::Test {
  sim_driver sim{small_machine(2)};

  stream_t new_stream(int device) {
    stream_t stream = nullptr;
    EXPECT_EQ(sim.stream_create(device, &stream), driver_status::success);
    return stream;
  }
  event_t new_event(int device) {
    event_t event = nullptr;
    EXPECT_EQ(sim.event_create(device, &event), driver_status::success);
    return event;
  }
};

TEST_F(SimStreams, StreamsAreDistinctAndBelongToTheirDevice) {
  const stream_t a = new_stream(0);
  const stream_t b = new_stream(0);
  const stream_t c = new_stream(1);
  EXPECT_NE(a, nullptr);
  EXPECT_NE(a, b);
  EXPECT_TRUE(sim.stream_on_device(a, 0));
  EXPECT_FALSE(sim.stream_on_device(a, 1));
  EXPECT_TRUE(sim.stream_on_device(c, 1));
  EXPECT_TRUE(sim.stream_on_device(nullptr, 0));
  EXPECT_TRUE(sim.stream_on_device(nullptr, 1));
  EXPECT_EQ(sim.stream_destroy(1, a), driver_status::invalid_value) << "a stream of another device";
  EXPECT_EQ(sim.stream_destroy(0, a), driver_status::success);
  EXPECT_FALSE(sim.stream_on_device(a, 0));
  EXPECT_EQ(sim.stream_destroy(0, a), driver_status::invalid_value) << "destroyed twice";
  EXPECT_EQ(sim.stream_synchronize(0, a), driver_status::invalid_value);
  EXPECT_THROW(sim.launch(0, a, 1.0), error);
}

TEST_F(SimStreams, EventsCompleteWhenTheClockPassesTheirStreamsWork) {
  const stream_t a = new_stream(0);
  const stream_t b = new_stream(0);
  const event_t after_a = new_event(0);
  const event_t after_b = new_event(0);
  sim.launch(0, a, 100.0);
  sim.launch(0, a, 50.0);
  sim.launch(0, b, 30.0);
  ASSERT_EQ(sim.event_record(0, after_a, a), driver_status::success);
  ASSERT_EQ(sim.event_record(0, after_b, b), driver_status::success);
  EXPECT_EQ(sim.event_query(0, after_a), driver_status::not_ready);
  EXPECT_EQ(sim.event_query(0, after_b), driver_status::not_ready);
  sim.advance(30.0);
  EXPECT_EQ(sim.event_query(0, after_b), driver_status::success) << "b's work was shorter";
  EXPECT_EQ(sim.event_query(0, after_a), driver_status::not_ready);
  sim.advance(119.0);
  EXPECT_EQ(sim.event_query(0, after_a), driver_status::not_ready);
  sim.advance(1.0);
  EXPECT_EQ(sim.event_query(0, after_a), driver_status::success);
  EXPECT_DOUBLE_EQ(sim.now(), 150.0);
}

TEST_F(SimStreams, RecordingOnAnIdleStreamCompletesAtOnce) {
  const stream_t a = new_stream(0);
  const event_t event = new_event(0);
  sim.launch(0, a, 10.0);
  sim.advance(20.0);
  ASSERT_EQ(sim.event_record(0, event, a), driver_status::success);
  EXPECT_EQ(sim.event_query(0, event), driver_status::success);
  // Work queued after an idle spell starts now, not at the stream's old tail.
  sim.launch(0, a, 5.0);
  ASSERT_EQ(sim.event_record(0, event, a), driver_status::success);
  sim.advance(4.0);
  EXPECT_EQ(sim.event_query(0, event), driver_status::not_ready);
  sim.advance(1.0);
  EXPECT_EQ(sim.event_query(0, event), driver_status::success);
}

TEST_F(SimStreams, StreamWaitEventOrdersWorkAcrossStreams) {
  const stream_t producer = new_stream(0);
  const stream_t consumer = new_stream(0);
  const event_t produced = new_event(0);
  const event_t consumed = new_event(0);
  sim.launch(0, producer, 100.0);
  ASSERT_EQ(sim.event_record(0, produced, producer), driver_status::success);
  ASSERT_EQ(sim.stream_wait_event(0, consumer, produced), driver_status::success);
  sim.launch(0, consumer, 10.0);
  ASSERT_EQ(sim.event_record(0, consumed, consumer), driver_status::success);
  sim.advance(100.0);
  EXPECT_EQ(sim.event_query(0, produced), driver_status::success);
  EXPECT_EQ(sim.event_query(0, consumed), driver_status::not_ready) << "the consumer started after the producer";
  sim.advance(10.0);
  EXPECT_EQ(sim.event_query(0, consumed), driver_status::success);
}

TEST_F(SimStreams, SynchronizeMovesTheClock) {
  const stream_t a = new_stream(0);
  const event_t event = new_event(0);
  sim.launch(0, a, 40.0);
  ASSERT_EQ(sim.event_record(0, event, a), driver_status::success);
  sim.launch(0, a, 60.0);
  ASSERT_EQ(sim.event_synchronize(0, event), driver_status::success);
  EXPECT_DOUBLE_EQ(sim.now(), 40.0);
  ASSERT_EQ(sim.stream_synchronize(0, a), driver_status::success);
  EXPECT_DOUBLE_EQ(sim.now(), 100.0);
  ASSERT_EQ(sim.stream_synchronize(0, a), driver_status::success);
  EXPECT_DOUBLE_EQ(sim.now(), 100.0) << "synchronizing an idle stream takes no time";
  sim.launch(1, nullptr, 25.0);
  sim.launch(0, nullptr, 5.0);
  sim.run_until_idle();
  EXPECT_DOUBLE_EQ(sim.now(), 125.0);
}

TEST_F(SimStreams, EventsBelongToTheirDevice) {
  const event_t on_zero = new_event(0);
  EXPECT_EQ(sim.event_record(1, on_zero, nullptr), driver_status::invalid_value);
  EXPECT_EQ(sim.event_query(1, on_zero), driver_status::invalid_value);
  EXPECT_EQ(sim.event_destroy(1, on_zero), driver_status::invalid_value);
  const stream_t on_one = new_stream(1);
  EXPECT_EQ(sim.event_record(0, on_zero, on_one), driver_status::invalid_value) << "a stream of another device";
  // A stream may wait on another device's event.
  sim.launch(0, nullptr, 10.0);
  ASSERT_EQ(sim.event_record(0, on_zero, nullptr), driver_status::success);
  EXPECT_EQ(sim.stream_wait_event(1, on_one, on_zero), driver_status::success);
  ASSERT_EQ(sim.event_destroy(0, on_zero), driver_status::success);
  EXPECT_EQ(sim.event_query(0, on_zero), driver_status::invalid_value) << "destroyed";
  EXPECT_EQ(sim.event_query(0, reinterpret_cast<event_t>(std::uintptr_t{0x1234})), driver_status::invalid_value);
}

TEST_F(SimStreams, MemFreeWaitsForAllQueuedWorkOfItsDevice) {
  device_address address = 0;
  ASSERT_EQ(sim.mem_alloc(0, 4096, &address), driver_status::success);
  const stream_t unrelated = new_stream(0);
  sim.launch(0, unrelated, 80'000.0);
  sim.launch(1, nullptr, 200'000.0);
  ASSERT_EQ(sim.mem_free(0, address), driver_status::success);
  EXPECT_DOUBLE_EQ(sim.now(), 80'000.0) << "waited for device 0's work, not device 1's";
  EXPECT_EQ(sim.unsafe_unmap_count(), 0u);
}

TEST_F(SimStreams, StreamWaitingOnAnEventKeepsMemFreeWaiting) {
  const stream_t waiting = new_stream(1);
  const event_t event = new_event(0);
  sim.launch(0, nullptr, 500.0);
  ASSERT_EQ(sim.event_record(0, event, nullptr), driver_status::success);
  ASSERT_EQ(sim.stream_wait_event(1, waiting, event), driver_status::success);
  device_address address = 0;
  ASSERT_EQ(sim.mem_alloc(1, 512, &address), driver_status::success);
  ASSERT_EQ(sim.mem_free(1, address), driver_status::success);
  EXPECT_DOUBLE_EQ(sim.now(), 500.0);
}

TEST_F(SimStreams, BadTimesAreRefused) {
  EXPECT_THROW(sim.advance(-1.0), error);
  EXPECT_THROW(sim.launch(0, nullptr, -5.0), error);
  EXPECT_THROW(sim.launch(3, nullptr, 5.0), error);
  EXPECT_DOUBLE_EQ(sim.now(), 0.0);
}

// CUDA's special handles: CU_STREAM_LEGACY (0x1) is the default stream, CU_STREAM_PER_THREAD (0x2)
// the calling thread's own stream, so work one thread queues there does not delay another's.
TEST_F(SimStreams, LegacyAndPerThreadHandles) {
  const auto legacy = reinterpret_cast<stream_t>(std::uintptr_t{1});
  const auto per_thread = reinterpret_cast<stream_t>(std::uintptr_t{2});
  EXPECT_TRUE(sim.stream_on_device(legacy, 0));
  EXPECT_TRUE(sim.stream_on_device(per_thread, 1));
  EXPECT_EQ(sim.stream_destroy(0, per_thread), driver_status::invalid_value);
  sim.launch(0, legacy, 100.0);
  const event_t on_default = new_event(0);
  ASSERT_EQ(sim.event_record(0, on_default, nullptr), driver_status::success);
  EXPECT_EQ(sim.event_query(0, on_default), driver_status::not_ready) << "0x1 and nullptr are one stream";

  sim.launch(0, per_thread, 500.0);
  const event_t here = new_event(0);
  const event_t there = new_event(0);
  ASSERT_EQ(sim.event_record(0, here, per_thread), driver_status::success);
  std::thread other([&] { EXPECT_EQ(sim.event_record(0, there, per_thread), driver_status::success); });
  other.join();
  EXPECT_EQ(sim.event_query(0, there), driver_status::success) << "another thread's stream is idle";
  EXPECT_EQ(sim.event_query(0, here), driver_status::not_ready);
  sim.advance(500.0);
  EXPECT_EQ(sim.event_query(0, here), driver_status::success);
}

TEST(SimStreamHandles, ReusedWhenAsked) {
  sim_config config = small_machine(1);
  config.reuse_stream_handles = true;
  sim_driver sim(config);
  stream_t a = nullptr;
  stream_t b = nullptr;
  ASSERT_EQ(sim.stream_create(0, &a), driver_status::success);
  sim.launch(0, a, 100.0);
  ASSERT_EQ(sim.stream_destroy(0, a), driver_status::success);
  ASSERT_EQ(sim.stream_create(0, &b), driver_status::success);
  EXPECT_EQ(b, a) << "the destroyed stream's handle names the new stream";
  event_t e = nullptr;
  ASSERT_EQ(sim.event_create(0, &e), driver_status::success);
  ASSERT_EQ(sim.event_record(0, e, b), driver_status::success);
  EXPECT_EQ(sim.event_query(0, e), driver_status::success) << "the new stream starts idle";
  EXPECT_EQ(sim.device_synchronize(0), driver_status::success);
  EXPECT_GE(sim.now(), 100.0) << "the old stream's work still held the device";
}

}  // namespace
}  // namespace tidepool::test

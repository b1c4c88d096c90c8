// The PyTorch baselines (`caching`, `expandable`) on frees made on another stream than the
// allocation's, which PyTorch sees as Tensor.record_stream() on that stream followed by the free:
// the block waits for an event on the freeing stream, is reused once that stream's queued work is
// done, and empty_cache() waits for it. Before the model kept these events it reused such a block
// at once, which no real allocator may, and so held less than reachable with the GPU behind.
#include "baseline_fixture.hpp"

namespace tidepool::replay::testing {
namespace {

class TorchRecordStream : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    ASSERT_EQ(b.sim->stream_create(0, &communication), driver_status::success);
  }
  void TearDown() override { (void)b.sim->stream_destroy(0, communication); }

  baseline b{GetParam()};
  stream_t compute = nullptr;
  stream_t communication = nullptr;
};

TEST_P(TorchRecordStream, AFreeOnAnotherStreamIsReusedOnlyOnceThatStreamsWorkIsDone) {
  const device_address bucket = b.alloc(30 * MiB, compute);
  const std::size_t held = b.held();
  b.sim->launch(0, communication, 1000.0);  // the reduction still runs when the bucket is freed
  b.free(bucket, 30 * MiB, communication);
  const device_address next = b.alloc(30 * MiB, compute);
  EXPECT_NE(next, bucket) << "reused while the communication stream still used it";
  EXPECT_GT(b.held(), held);
  b.free(next, 30 * MiB, compute);

  b.sim->advance(1000.0);  // the reduction is done
  const std::size_t held_after = b.held();
  const device_address again = b.alloc(30 * MiB, compute);
  const device_address other = b.alloc(30 * MiB, compute);
  EXPECT_TRUE(again == bucket || other == bucket) << "the bucket never came back";
  EXPECT_EQ(b.held(), held_after) << "grew although both blocks were free";
  b.free(again, 30 * MiB, compute);
  b.free(other, 30 * MiB, compute);
}

TEST_P(TorchRecordStream, WithTheGpuKeepingUpTheNextAllocationReusesTheBlock) {
  const device_address bucket = b.alloc(30 * MiB, compute);
  const std::size_t held = b.held();
  b.free(bucket, 30 * MiB, communication);
  EXPECT_EQ(b.alloc(30 * MiB, compute), bucket);
  EXPECT_EQ(b.held(), held);
}

TEST_P(TorchRecordStream, EmptyCacheWaitsForTheFreeingStreamAndHandsTheBlockBack) {
  const device_address bucket = b.alloc(30 * MiB, compute);
  const std::size_t held = b.held();
  b.sim->launch(0, communication, 5000.0);
  b.free(bucket, 30 * MiB, communication);
  EXPECT_EQ(b.allocator->release(), held);
  EXPECT_EQ(b.held(), 0u);
  EXPECT_GE(b.sim->now(), 5000.0) << "handed back before the stream's work was done";
}

TEST_P(TorchRecordStream, AnAllocationThatDoesNotFitWaitsForTheEventsBeforeItFails) {
  // On a GPU of 40 MiB the second bucket fits only in the first one's memory: PyTorch's retry
  // (release_cached_blocks) waits for the events, frees the cache, and allocates again.
  sim_config config;
  config.capacity = 40 * MiB;
  auto sim = std::make_shared<sim_driver>(config);
  ASSERT_EQ(sim->open_context(0), driver_status::success);
  stream_t comm = nullptr;
  ASSERT_EQ(sim->stream_create(0, &comm), driver_status::success);
  {
    const auto allocator = make_allocator(GetParam(), sim, 0);
    const auto bucket = allocator->allocate(30 * MiB, compute);
    ASSERT_TRUE(bucket.has_value());
    sim->launch(0, comm, 2000.0);
    allocator->deallocate(*bucket, 30 * MiB, comm);
    const auto again = allocator->allocate(30 * MiB, compute);
    ASSERT_TRUE(again.has_value()) << "failed with the memory free behind a pending event";
    EXPECT_GE(sim->now(), 2000.0) << "reused before the communication stream was done";
    allocator->deallocate(*again, 30 * MiB, compute);
  }
  EXPECT_EQ(sim->physical_bytes(0), 0u);
  (void)sim->stream_destroy(0, comm);
}

INSTANTIATE_TEST_SUITE_P(PyTorchModels, TorchRecordStream, ::testing::Values("caching", "expandable"),
                         [](const ::testing::TestParamInfo<const char*>& model) { return std::string(model.param); });

}  // namespace
}  // namespace tidepool::replay::testing

// Bad input: each case throws tidepool::error with the right code and a message naming the value,
// and leaves the pool exactly as it was (every figure of stats()).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "pool_checker.hpp"

namespace tidepool::testing {
namespace {

void expect_same(const pool_stats& a, const pool_stats& b) {
  EXPECT_EQ(a.in_use_bytes, b.in_use_bytes);
  EXPECT_EQ(a.requested_bytes, b.requested_bytes);
  EXPECT_EQ(a.cached_bytes, b.cached_bytes);
  EXPECT_EQ(a.mapped_bytes, b.mapped_bytes);
  EXPECT_EQ(a.reserved_address_bytes, b.reserved_address_bytes);
  EXPECT_EQ(a.live_allocations, b.live_allocations);
  EXPECT_EQ(a.allocations, b.allocations);
  EXPECT_EQ(a.deallocations, b.deallocations);
  EXPECT_EQ(a.released_bytes, b.released_bytes);
  EXPECT_EQ(a.driver.total_calls(), b.driver.total_calls());
}

template <class F>
void expect_error(pool& p, error_code code, const std::string& names, F&& f) {
  const pool_stats before = p.stats();
  try {
    f();
    ADD_FAILURE() << "expected tidepool::error";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what() << " should name " << names;
  }
  expect_same(before, p.stats());
}

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

class PoolErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    auto config = small_device(256 * MiB);
    config.device_count = 2;
    config.devices_with_context = {0, 1};
    sim = std::make_shared<sim_driver>(config);
    p = std::make_unique<pool>(sim, 0);
    live = p->allocate(4096);
    void* freed = p->allocate(8192);
    p->deallocate(freed);
    freed_ptr = freed;
  }
  std::shared_ptr<sim_driver> sim;
  std::unique_ptr<pool> p;
  void* live = nullptr;
  void* freed_ptr = nullptr;
};

TEST_F(PoolErrors, ZeroSize) {
  expect_error(*p, error_code::invalid_size, "0 bytes", [&] { (void)p->allocate(0); });
}

TEST_F(PoolErrors, LargerThanTheDevice) {
  expect_error(*p, error_code::invalid_size, std::to_string(257 * MiB), [&] { (void)p->allocate(257 * MiB); });
}

TEST_F(PoolErrors, DoubleFree) {
  expect_error(*p, error_code::double_free, hex(freed_ptr), [&] { p->deallocate(freed_ptr); });
}

TEST_F(PoolErrors, ForeignPointer) {
  int on_host = 0;
  expect_error(*p, error_code::invalid_pointer, hex(&on_host), [&] { p->deallocate(&on_host); });
  expect_error(*p, error_code::invalid_pointer, "0x", [&] { p->deallocate(nullptr); });
}

TEST_F(PoolErrors, InteriorPointer) {
  void* inside = static_cast<char*>(live) + 512;
  expect_error(*p, error_code::invalid_pointer, hex(inside), [&] { p->deallocate(inside); });
  expect_error(*p, error_code::invalid_pointer, hex(inside), [&] { (void)p->allocation_size(inside); });
}

TEST_F(PoolErrors, StreamOfAnotherDevice) {
  stream_t other = nullptr;
  ASSERT_EQ(sim->stream_create(1, &other), driver_status::success);
  expect_error(*p, error_code::invalid_stream, hex(other), [&] { (void)p->allocate(1024, other); });
  expect_error(*p, error_code::invalid_stream, hex(other), [&] { p->deallocate(live, other); });
  expect_error(*p, error_code::invalid_stream, hex(other), [&] { p->record_stream(live, other); });
  EXPECT_TRUE(p->owns(live));
  EXPECT_EQ(p->allocation_size(live), 4096u);
  p->deallocate(live);
}

TEST_F(PoolErrors, BadDeviceAndDriver) {
  EXPECT_THROW(pool(sim, 2), error);
  EXPECT_THROW(pool(nullptr, 0), error);
  EXPECT_THROW(p->enable_peer_access(5), error);
}

}  // namespace
}  // namespace tidepool::testing

// The fault sweep through the C API (issue 10): allocations on two streams (tidepool_allocate, the
// PyTorch and CuPy entry points), record_stream with work queued, frees, a foreign pointer and a
// double free, release, release_cached_memory and stats, with a driver failure injected at every
// driver call in turn and at random (tests/core/fault_sweep.hpp). Each call returns success or a
// status with a message; afterwards nothing is held once everything is freed and released, and the
// C API still allocates.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

#include "core/fault_sweep.hpp"
#include "process/process_fixture.hpp"
#include "tidepool/c_api.h"

namespace tidepool::testing {
namespace {

using CApiFaults = process_test;

// A status a call may end with under an injected driver failure; anything else fails the test.
void expect_ok_or_clear(tidepool_status status, const char* call) {
  if (status == TIDEPOOL_SUCCESS) return;
  EXPECT_TRUE(status == TIDEPOOL_OUT_OF_MEMORY || status == TIDEPOOL_DRIVER_FAILURE)
      << call << ": " << tidepool_status_name(status) << ": " << tidepool_last_error();
  EXPECT_EQ(tidepool_last_status(), status);
  EXPECT_NE(std::strstr(tidepool_last_error(), "tidepool"), nullptr) << call << ": " << tidepool_last_error();
}

struct live_block {
  std::size_t bytes;
  stream_t stream;
  std::uint64_t tag;
};

driver_call_counts run_capi(const fault_arming& arm) {
  detail::reset_process_for_testing();
  sim_config config;
  config.capacity = 512 * MiB;
  config.back_with_host_memory = true;
  config.devices_with_context = {0};
  auto sim = std::make_shared<sim_driver>(config);
  set_default_driver(sim);
  stream_t s = nullptr;
  EXPECT_EQ(sim->stream_create(0, &s), driver_status::success);
  arm(*sim);
  const driver_call_counts before = sim->call_counts();
  tidepool_pool_options_t options{};
  options.struct_size = sizeof(options);
  EXPECT_EQ(tidepool_get_default_pool_options(&options), TIDEPOOL_SUCCESS);
  options.byte_cap = 96 * MiB;  // out of memory now and then
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_SUCCESS);

  std::map<void*, live_block> live;
  std::uint64_t next_tag = 1;
  auto write = [&](void* ptr, std::size_t bytes) {
    std::byte* host = sim->host_view(0, reinterpret_cast<device_address>(ptr), bytes);
    ASSERT_NE(host, nullptr);
    const std::uint64_t tag = next_tag++ * 0x9E3779B97F4A7C15ull;
    std::memcpy(host, &tag, 8);
    std::memcpy(host + bytes - 8, &tag, 8);
    live[ptr].tag = tag;
  };
  auto intact = [&](void* ptr) {
    const live_block& b = live.at(ptr);
    std::byte* host = sim->host_view(0, reinterpret_cast<device_address>(ptr), b.bytes);
    return host != nullptr && std::memcmp(host, &b.tag, 8) == 0 && std::memcmp(host + b.bytes - 8, &b.tag, 8) == 0;
  };
  auto free_one = [&](void* ptr) -> bool {
    EXPECT_TRUE(intact(ptr)) << "a live block was overwritten or unmapped";
    const tidepool_status status = tidepool_deallocate(ptr, TIDEPOOL_ANY_DEVICE, live.at(ptr).stream);
    expect_ok_or_clear(status, "tidepool_deallocate");
    if (status != TIDEPOOL_SUCCESS) return false;
    live.erase(ptr);
    return true;
  };
  auto check_figures = [&] {
    tidepool_stats_t st{};
    st.struct_size = sizeof(st);
    if (tidepool_stats(0, &st) != TIDEPOOL_SUCCESS) return;  // no pool yet
    EXPECT_EQ(st.in_use_bytes + st.cached_bytes, st.mapped_bytes);
    EXPECT_EQ(st.mapped_bytes, sim->physical_bytes(0));
    EXPECT_EQ(st.live_allocations, live.size());
    EXPECT_EQ(sim->unsafe_unmap_count(), 0u);
  };

  const std::size_t sizes[] = {512, 3 * MiB, 20 * MiB, 64 * 1024, 40 * MiB, 1 * MiB};
  int local = 0;
  for (int i = 0; i < 36; ++i) {
    const std::size_t bytes = sizes[i % 6];
    const stream_t on = i % 2 == 0 ? s : nullptr;
    void* ptr = nullptr;
    if (i % 6 == 1) {
      try {
        ptr = tidepool_torch_alloc(bytes, 0, on);  // throws on failure, as PyTorch expects
      } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("tidepool"), std::string::npos) << e.what();
      }
    } else if (i % 6 == 3) {
      (void)tidepool_set_current_stream(0, on);
      ptr = tidepool_cupy_malloc(nullptr, bytes, 0);  // NULL on failure
      if (ptr == nullptr) expect_ok_or_clear(tidepool_last_status(), "tidepool_cupy_malloc");
    } else {
      expect_ok_or_clear(tidepool_allocate(bytes, 0, on, i % 5 == 0 ? TIDEPOOL_PERSISTENT : TIDEPOOL_SCRATCH, &ptr),
                         "tidepool_allocate");
    }
    if (ptr != nullptr) {
      live[ptr] = live_block{bytes, on, 0};
      write(ptr, bytes);
      if (i % 3 == 0) {
        sim->launch(0, s, 20.0, reinterpret_cast<device_address>(ptr), bytes);
        expect_ok_or_clear(tidepool_record_stream(ptr, 0, s), "tidepool_record_stream");
      }
    }
    if (live.size() > 4) {
      void* oldest = live.begin()->first;
      if (free_one(oldest)) {
        // Freed just now: a double free, whatever the driver did.
        EXPECT_EQ(tidepool_deallocate(oldest, TIDEPOOL_ANY_DEVICE, nullptr), TIDEPOOL_DOUBLE_FREE)
            << tidepool_last_error();
      }
    }
    EXPECT_EQ(tidepool_deallocate(&local, TIDEPOOL_ANY_DEVICE, nullptr), TIDEPOOL_INVALID_POINTER);
    if (i % 8 == 7) {
      std::size_t bytes_back = 0;
      expect_ok_or_clear(tidepool_release(0, &bytes_back), "tidepool_release");
    }
    if (i % 12 == 11) {
      std::size_t bytes_back = 0;
      expect_ok_or_clear(tidepool_release_cached_memory(&bytes_back), "tidepool_release_cached_memory");
    }
    sim->advance(10.0);
    check_figures();
    if (::testing::Test::HasFailure()) break;
  }
  // Everything freed (a failed free is tried again), released: nothing held.
  for (int attempt = 0; attempt < 5 && !live.empty(); ++attempt) {
    std::vector<void*> rest;
    for (const auto& [ptr, b] : live) rest.push_back(ptr);
    for (void* ptr : rest) (void)free_one(ptr);
  }
  EXPECT_TRUE(live.empty());
  tidepool_status released = TIDEPOOL_DRIVER_FAILURE;
  for (int attempt = 0; attempt < 5 && released != TIDEPOOL_SUCCESS; ++attempt) {
    std::size_t bytes_back = 0;
    released = tidepool_release(0, &bytes_back);
    if (released == TIDEPOOL_INVALID_DEVICE) break;  // no pool was ever made
    expect_ok_or_clear(released, "tidepool_release");
  }
  check_figures();
  {
    tidepool_stats_t st{};
    st.struct_size = sizeof(st);
    (void)tidepool_stats(0, &st);
    expect_nothing_held(sim->physical_bytes(0), st.mapped_bytes);
  }
  // The C API still works.
  for (std::size_t bytes : {std::size_t{4096}, 24 * MiB}) {
    void* ptr = nullptr;
    tidepool_status status = TIDEPOOL_DRIVER_FAILURE;
    for (int attempt = 0; attempt < 5 && status != TIDEPOOL_SUCCESS; ++attempt) {
      status = tidepool_allocate(bytes, 0, s, TIDEPOOL_SCRATCH, &ptr);
      expect_ok_or_clear(status, "tidepool_allocate afterwards");
    }
    EXPECT_EQ(status, TIDEPOOL_SUCCESS);
    if (status != TIDEPOOL_SUCCESS) break;
    live[ptr] = live_block{bytes, s, 0};
    write(ptr, bytes);
    EXPECT_TRUE(free_one(ptr));
  }
  expect_ok_or_clear(tidepool_forget_stream(0, s), "tidepool_forget_stream");
  driver_call_counts calls = sim->call_counts();
  calls -= before;
  (void)sim->stream_destroy(0, s);
  detail::reset_process_for_testing();
  return calls;
}

TEST_F(CApiFaults, EveryDriverCallFailsOnce) {
  const fault_sweep_result r = sweep_faults("C API sequence", run_capi, 20);
  EXPECT_GT(r.every_call_points, 50u);
}

}  // namespace
}  // namespace tidepool::testing

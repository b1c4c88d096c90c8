// Tests of how the process picks its driver from the environment: TIDEPOOL_DEVICE=sim with
// TIDEPOOL_SIM_DEVICES and TIDEPOOL_SIM_CAPACITY, else CUDA; malformed values are named.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "process/process_fixture.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::testing {
namespace {

// Sets the variables of one test and restores "unset" after it.
class DefaultDriver : public process_test {
 protected:
  void TearDown() override {
    for (const char* name : {"TIDEPOOL_DEVICE", "TIDEPOOL_SIM_DEVICES", "TIDEPOOL_SIM_CAPACITY", "TIDEPOOL_SIM_FAIL"}) {
      ::unsetenv(name);
    }
    process_test::TearDown();
  }
  static void set(const char* name, const char* value) { ::setenv(name, value, 1); }

  // The message of the error default_driver() throws, or "" if it throws none.
  static std::string refusal() {
    detail::reset_process_for_testing();
    try {
      (void)default_driver();
    } catch (const error& e) {
      EXPECT_EQ(e.code(), error_code::invalid_argument);
      return e.what();
    }
    return "";
  }
};

TEST_F(DefaultDriver, SimWithDevicesAndCapacityFromTheEnvironment) {
  set("TIDEPOOL_DEVICE", "sim");
  set("TIDEPOOL_SIM_DEVICES", "3");
  set("TIDEPOOL_SIM_CAPACITY", "2GiB");
  const auto drv = default_driver();
  EXPECT_EQ(drv->name(), "sim");
  EXPECT_EQ(drv->device_count(), 3);
  EXPECT_EQ(drv->memory_info(2).total, 2 * GiB);
  EXPECT_EQ(default_driver(), drv);  // one driver per process
  EXPECT_EQ(device_pool(2).get_driver(), drv);
}

TEST_F(DefaultDriver, CapacityInPlainBytes) {
  set("TIDEPOOL_DEVICE", "sim");
  set("TIDEPOOL_SIM_CAPACITY", "1073741824");
  EXPECT_EQ(default_driver()->memory_info(0).total, GiB);
  EXPECT_EQ(default_driver()->device_count(), 1);
}

TEST_F(DefaultDriver, MalformedVariablesAreNamedWithTheirValue) {
  set("TIDEPOOL_DEVICE", "gpu");
  EXPECT_NE(refusal().find("TIDEPOOL_DEVICE='gpu'"), std::string::npos);
  set("TIDEPOOL_DEVICE", "sim");
  for (const char* bad : {"abc", "0", "65", "2x", "-1"}) {
    set("TIDEPOOL_SIM_DEVICES", bad);
    EXPECT_NE(refusal().find(std::string("TIDEPOOL_SIM_DEVICES='") + bad + "'"), std::string::npos)
        << bad;
  }
  ::unsetenv("TIDEPOOL_SIM_DEVICES");
  for (const char* bad : {"12XB", "1MiB", "GiB", "99999999999999999999", "20000000TiB"}) {
    set("TIDEPOOL_SIM_CAPACITY", bad);
    EXPECT_NE(refusal().find(std::string("TIDEPOOL_SIM_CAPACITY='") + bad + "'"), std::string::npos)
        << bad;
  }
}

TEST_F(DefaultDriver, SimFailuresFromTheEnvironment) {
  set("TIDEPOOL_DEVICE", "sim");
  set("TIDEPOOL_SIM_FAIL", "mem_create:2:out_of_memory,event_create:1");
  const auto drv = default_driver();
  drv->open_context(0);
  physical_handle h1 = 0;
  physical_handle h2 = 0;
  EXPECT_EQ(drv->mem_create(0, 2 * MiB, &h1), driver_status::success);
  EXPECT_EQ(drv->mem_create(0, 2 * MiB, &h2), driver_status::out_of_memory);
  EXPECT_EQ(drv->mem_create(0, 2 * MiB, &h2), driver_status::success);
  event_t e = nullptr;
  EXPECT_EQ(drv->event_create(0, &e), driver_status::error);
  EXPECT_EQ(drv->mem_release(0, h1), driver_status::success);
  EXPECT_EQ(drv->mem_release(0, h2), driver_status::success);
  for (const char* bad : {"mem_create", "mem_create:0", "mem_create:x", "no_such_call:1", "mem_create:1:success",
                          "mem_create:1:oops", ",mem_create:1"}) {
    set("TIDEPOOL_SIM_FAIL", bad);
    EXPECT_NE(refusal().find(std::string("TIDEPOOL_SIM_FAIL='") + bad + "'"), std::string::npos) << bad;
  }
}

TEST_F(DefaultDriver, CudaUnlessSimIsAsked) {
  ::unsetenv("TIDEPOOL_DEVICE");
  const std::string reason = cuda_driver_unavailable_reason();
  if (reason.empty()) {
    EXPECT_EQ(default_driver()->name(), "cuda");
  } else {
    try {
      (void)default_driver();
      FAIL() << "no CUDA driver here (" << reason << "), yet one was made";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), error_code::unavailable);
      // The reason, and what a program without a GPU can do instead.
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("set TIDEPOOL_DEVICE=sim"), std::string::npos) << e.what();
    }
    // Asked for by name, CUDA is what the program gets, or the plain reason it cannot.
    set("TIDEPOOL_DEVICE", "cuda");
    detail::reset_process_for_testing();
    try {
      (void)default_driver();
      FAIL() << "no CUDA driver here, yet one was made";
    } catch (const error& e) {
      EXPECT_EQ(std::string(e.what()), reason);
    }
    // Without a driver nothing was opened, so there is nothing to release.
    EXPECT_EQ(release_cached_memory(), 0u);
  }
}

}  // namespace
}  // namespace tidepool::testing

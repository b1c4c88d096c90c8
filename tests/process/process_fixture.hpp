// process_fixture.hpp: a test fixture for the process-wide layer (and the C API over it): each
// test installs its own simulated machine as the process's driver and starts from no pools.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <utility>

#include "process/process_state.hpp"
#include "tidepool/process.hpp"
#include "tidepool/reclaim.hpp"
#include "tidepool/sim.hpp"

namespace tidepool::testing {

inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;

class process_test : public ::testing::Test {
 protected:
  void SetUp() override { detail::reset_process_for_testing(); }
  void TearDown() override { detail::reset_process_for_testing(); }

  /// Makes `config` the process's machine.
  sim_driver& use_sim(sim_config config) {
    sim_ = std::make_shared<sim_driver>(std::move(config));
    set_default_driver(sim_);
    return *sim_;
  }

  /// A small machine: `devices` devices of 1 GiB each.
  sim_driver& use_small_sim(int devices = 1) {
    sim_config config;
    config.device_count = devices;
    config.capacity = GiB;
    return use_sim(std::move(config));
  }

  std::shared_ptr<sim_driver> sim_;
};

/// Registers a reclaim hook for the life of the object.
class scoped_hook {
 public:
  explicit scoped_hook(reclaim_hook hook) : id_(add_reclaim_hook(std::move(hook))) {}
  ~scoped_hook() { remove_reclaim_hook(id_); }
  scoped_hook(const scoped_hook&) = delete;
  scoped_hook& operator=(const scoped_hook&) = delete;

 private:
  int id_;
};

}  // namespace tidepool::testing

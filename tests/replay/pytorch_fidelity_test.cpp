// The `caching` and `expandable` baselines against PyTorch 2.11 itself: replaying the recorded
// traces on sim must give the peak reserved PyTorch measured on the H200 (traces/README), within 3%.
#include <gtest/gtest.h>

#include <string>

#include "bundled_trace.hpp"
#include "replay/replay_engine.hpp"
#include "tidepool/sim.hpp"

namespace tidepool::replay::testing {
namespace {

constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

double peak_reserved_gib(const std::string& file, const char* allocator) {
  const trace t = read_bundled_trace(file);
  return static_cast<double>(replay_trace(t, allocator, std::make_shared<sim_driver>()).peak_held_bytes) / GiB;
}

TEST(PytorchFidelity, Gpt2TrainingPeakReserved) {
  EXPECT_NEAR(peak_reserved_gib("gpt2_train.csv.gz", "caching"), 14.24, 0.03 * 14.24);
  EXPECT_NEAR(peak_reserved_gib("gpt2_train.csv.gz", "expandable"), 13.54, 0.03 * 13.54);
}

TEST(PytorchFidelity, Resnet50TrainingPeakReserved) {
  EXPECT_NEAR(peak_reserved_gib("resnet50_train.csv.gz", "caching"), 3.54, 0.03 * 3.54);
  EXPECT_NEAR(peak_reserved_gib("resnet50_train.csv.gz", "expandable"), 3.02, 0.03 * 3.02);
}

}  // namespace
}  // namespace tidepool::replay::testing

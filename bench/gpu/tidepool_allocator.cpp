// tidepool_allocator.cpp: tidepool's pool on the cuda driver, as the benchmark runs it: at its
// default options, and with a generous growth budget (growth_slack 0.5), which shows the cached
// path once the pool no longer moves handles to stay within 1.01x of peak in use. One pool per
// device: the two-GPU thread table makes one of each for devices 0 and 1.
#include <utility>

#include "compare_allocator.hpp"
#include "tidepool/driver.hpp"
#include "tidepool/pool.hpp"

namespace tidepool::bench {
namespace {

class tidepool_allocator final : public compare_allocator {
 public:
  tidepool_allocator(std::string name, int device, pool_options options)
      : name_(std::move(name)), pool_(make_cuda_driver(), device, options) {}
  [[nodiscard]] std::string name() const override { return name_; }
  void* allocate(std::size_t bytes) override { return pool_.allocate(bytes); }
  void deallocate(void* ptr, std::size_t) override { pool_.deallocate(ptr); }
  void release_cache() override { pool_.release(); }
  std::optional<std::size_t> thread_caches() override { return pool_.stats().thread_caches; }

 private:
  std::string name_;
  pool pool_;
};

pool_options generous_budget() {
  pool_options options;
  options.growth_slack = 0.5;
  return options;
}

// The default first: the table's ratios are to it. The generous budget runs last.
const register_allocator registered(0, [](int device) {
  return std::make_unique<tidepool_allocator>("tidepool", device, pool_options{});
});
const register_allocator registered_generous(3, [](int device) {
  return std::make_unique<tidepool_allocator>("tidepool growth_slack 0.5", device, generous_budget());
});

}  // namespace
}  // namespace tidepool::bench

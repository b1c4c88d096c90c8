// tidepool_allocator.cpp: tidepool's pool on the cuda driver, as the benchmark runs it.
#include "compare_allocator.hpp"
#include "tidepool/driver.hpp"
#include "tidepool/pool.hpp"

namespace tidepool::bench {
namespace {

class tidepool_allocator final : public compare_allocator {
 public:
  tidepool_allocator() : pool_(make_cuda_driver(), 0) {}
  [[nodiscard]] std::string name() const override { return "tidepool"; }
  void* allocate(std::size_t bytes) override { return pool_.allocate(bytes); }
  void deallocate(void* ptr, std::size_t) override { pool_.deallocate(ptr); }
  void release_cache() override { pool_.release(); }

 private:
  pool pool_;
};

const register_allocator registered(0, [] { return std::make_unique<tidepool_allocator>(); });

}  // namespace
}  // namespace tidepool::bench

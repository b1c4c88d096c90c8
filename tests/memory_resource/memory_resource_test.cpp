// memory_resource_test.cpp: tidepool::memory_resource (include/tidepool/memory_resource.hpp) on the
// simulated GPU, compiled by the host compiler against CCCL's headers (no nvcc): CCCL's own
// concepts accept it (static_assert), both spellings of the interface (CCCL 3.0's and RMM
// 26.06's / CCCL 3.1's) allocate and free on the pool they share, streams reach the pool,
// alignments beyond 256 bytes are refused before anything is allocated, and a bad free leaves
// the pool as it was through every form.
#include "tidepool/memory_resource.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "tidepool/sim.hpp"

namespace tidepool {
namespace {

using cuda::mr::device_accessible;

// RMM 26.06's form (CCCL 3.1's cuda::mr::resource and synchronous_resource), spelled out so it is
// checked with the CCCL 3.0 of the CUDA 13.0 toolkit too.
template <class R>
concept rmm_26_resource = std::equality_comparable<R> && std::copy_constructible<R> &&
    requires(R& r, void* p, std::size_t n, std::size_t a, cuda::stream_ref s) {
      { r.allocate(s, n, a) } -> std::same_as<void*>;
      { r.deallocate(s, p, n, a) } noexcept -> std::same_as<void>;
      { r.allocate_sync(n, a) } -> std::same_as<void*>;
      { r.deallocate_sync(p, n, a) } noexcept -> std::same_as<void>;
      { r.allocate(s, n) } -> std::same_as<void*>;  // alignment defaults, as RMM's do
    };
static_assert(rmm_26_resource<memory_resource>);

#if CCCL_VERSION >= 3001000
static_assert(cuda::mr::resource_with<memory_resource, device_accessible>);
static_assert(cuda::mr::synchronous_resource_with<memory_resource, device_accessible>);
using any_ref = cuda::mr::resource_ref<device_accessible>;
#else
static_assert(cuda::mr::async_resource_with<memory_resource, device_accessible>);
static_assert(cuda::mr::resource_with<memory_resource, device_accessible>);
using any_ref = cuda::mr::async_resource_ref<device_accessible>;
#endif
static_assert(cuda::has_property<memory_resource, device_accessible>);
static_assert(!cuda::has_property<memory_resource, cuda::mr::host_accessible>);
static_assert(std::is_nothrow_copy_constructible_v<memory_resource>);

constexpr std::size_t MiB = std::size_t{1} << 20;

cuda::stream_ref ref(stream_t s) { return cuda::stream_ref{s}; }

class MemoryResourceOnSim : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(drv->stream_create(0, &s1), driver_status::success);
    ASSERT_EQ(drv->stream_create(0, &s2), driver_status::success);
  }
  std::shared_ptr<sim_driver> drv = std::make_shared<sim_driver>();
  pool p{drv, 0};
  memory_resource mr{p};
  stream_t s1 = nullptr;
  stream_t s2 = nullptr;
};

TEST_F(MemoryResourceOnSim, BothFormsAllocateAndFreeOnTheSharedPool) {
  memory_resource copy = mr;
  void* a = mr.allocate(ref(s1), 3 * MiB);                // RMM 26.06: stream first
  void* b = copy.allocate_async(5 * MiB, 256, ref(s2));   // CCCL 3.0: stream last
  void* c = mr.allocate_sync(1000, 128);
  void* d = copy.allocate(4096, 64);                       // CCCL 3.0 synchronous
  EXPECT_EQ(p.stats().live_allocations, 4u);
  EXPECT_EQ(p.allocation_size(a), 3 * MiB);
  EXPECT_EQ(p.allocation_size(b), 5 * MiB);
  EXPECT_EQ(p.allocation_size(c), 1000u);
  EXPECT_EQ(p.allocation_size(d), 4096u);
  EXPECT_EQ(p.stats().streams, 3u) << "s1, s2 and the default stream reach the pool";
  // Memory of one form may be freed through the other, and through a copy.
  copy.deallocate(ref(s1), a, 3 * MiB);
  mr.deallocate_async(b, 5 * MiB, 256, ref(s2));
  copy.deallocate_sync(c, 1000, 128);
  mr.deallocate(d, 4096, 64);
  EXPECT_EQ(p.stats().live_allocations, 0u);
  EXPECT_EQ(p.stats().deallocations, 4u);
}

TEST_F(MemoryResourceOnSim, MemoryFreedOnAStreamReachesAnotherOnlyAfterItsWork) {
  // Work queued on s1 still runs when the block is freed there: s1 may reuse it at once, s2 may
  // not. Both hold only if each form hands its stream to the pool.
  void* a = mr.allocate(ref(s1), 8 * MiB);
  drv->launch(0, s1, 1000.0, reinterpret_cast<device_address>(a), 8 * MiB);
  mr.deallocate_async(a, 8 * MiB, 256, ref(s1));
  void* other = mr.allocate_async(8 * MiB, 256, ref(s2));
  EXPECT_NE(other, a) << "s2 got memory s1's queued work still uses";
  void* same = mr.allocate(ref(s1), 8 * MiB);
  EXPECT_EQ(same, a) << "s1 did not get back what it freed";
  mr.deallocate(ref(s1), same, 8 * MiB);
  mr.deallocate(ref(s2), other, 8 * MiB);
  drv->run_until_idle();
}

TEST_F(MemoryResourceOnSim, ThroughCcclsTypeErasedReference) {
  any_ref r{mr};
#if CCCL_VERSION >= 3001000
  void* a = r.allocate(ref(s1), 2 * MiB, 256);
  EXPECT_TRUE(p.owns(a));
  r.deallocate(ref(s1), a, 2 * MiB, 256);
#else
  void* a = r.allocate_async(2 * MiB, 256, ref(s1));
  EXPECT_TRUE(p.owns(a));
  r.deallocate_async(a, 2 * MiB, 256, ref(s1));
  void* b = r.allocate(MiB, 256);
  r.deallocate(b, MiB, 256);
#endif
  EXPECT_EQ(p.stats().live_allocations, 0u);
  EXPECT_TRUE(r == any_ref{mr});
}

TEST_F(MemoryResourceOnSim, EqualWhenTheyShareAPool) {
  pool other{drv, 0};
  memory_resource copy = mr;
  EXPECT_TRUE(copy == mr);
  EXPECT_FALSE(copy != mr);
  EXPECT_FALSE(memory_resource{other} == mr);
  EXPECT_TRUE(memory_resource{other} != mr);
  EXPECT_EQ(&copy.get_pool(), &p);
}

TEST_F(MemoryResourceOnSim, HonoursAlignmentsUpTo256) {
  for (std::size_t alignment = 1; alignment <= memory_resource::guaranteed_alignment; alignment *= 2) {
    void* a = mr.allocate(ref(s1), 100, alignment);
    void* b = mr.allocate(100, alignment);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % alignment, 0u) << alignment;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % alignment, 0u) << alignment;
    mr.deallocate(ref(s1), a, 100, alignment);
    mr.deallocate(b, 100, alignment);
  }
}

TEST_F(MemoryResourceOnSim, RefusesOtherAlignmentsBeforeAllocating) {
  for (std::size_t alignment : {std::size_t{0}, std::size_t{3}, std::size_t{384}, std::size_t{512},
                                std::size_t{4096}, std::size_t{2} * MiB}) {
    for (int form = 0; form < 4; ++form) {
      try {
        void* never = form == 0   ? mr.allocate(ref(s1), MiB, alignment)
                      : form == 1 ? mr.allocate_sync(MiB, alignment)
                      : form == 2 ? mr.allocate(MiB, alignment)
                                  : mr.allocate_async(MiB, alignment, ref(s1));
        ADD_FAILURE() << "alignment " << alignment << " was accepted by form " << form << ": " << never;
      } catch (const error& e) {
        EXPECT_EQ(e.code(), error_code::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("alignment " + std::to_string(alignment)), std::string::npos)
            << e.what();
      }
    }
  }
  EXPECT_EQ(p.stats().allocations, 0u);
  EXPECT_EQ(p.stats().mapped_bytes, 0u);
}

TEST_F(MemoryResourceOnSim, ABadFreeLeavesThePoolAsItWas) {
  void* a = mr.allocate(ref(s1), MiB);
  void* live = mr.allocate(ref(s1), 2 * MiB);
  mr.deallocate(ref(s1), a, MiB);
  const pool_stats before = p.stats();
  // CCCL 3.0's deallocate_async may throw: it does.
  try {
    mr.deallocate_async(a, MiB, 256, ref(s1));
    ADD_FAILURE() << "a double free was accepted";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), error_code::double_free);
  }
  // The deallocations CCCL and RMM call from noexcept code say so on stderr; an exception would
  // end the program there (CCCL 3.0's resource_ref::deallocate is noexcept).
  int foreign = 0;
  any_ref erased{mr};
  ::testing::internal::CaptureStderr();
  mr.deallocate(ref(s1), a, MiB);
  mr.deallocate_sync(&foreign, sizeof foreign);
  mr.deallocate(&foreign, sizeof foreign, 4);
#if CCCL_VERSION >= 3001000
  erased.deallocate_sync(a, MiB, 256);
#else
  erased.deallocate(a, MiB, 256);
#endif
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("tidepool::memory_resource: deallocate refused"), std::string::npos) << said;
  EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 4) << said;
  const cuda::stream_ref default_stream{static_cast<stream_t>(nullptr)};
  static_assert(noexcept(mr.deallocate(nullptr, 0, 256)) && noexcept(mr.deallocate_sync(nullptr, 0)) &&
                noexcept(mr.deallocate(default_stream, nullptr, 0)));
  const pool_stats after = p.stats();
  EXPECT_EQ(after.live_allocations, before.live_allocations);
  EXPECT_EQ(after.deallocations, before.deallocations);
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes);
  EXPECT_TRUE(p.owns(live));
  mr.deallocate(ref(s1), live, 2 * MiB);
}

TEST(MemoryResourceOnTheProcessPool, SharesTheDevicesPool) {
  set_default_driver(std::make_shared<sim_driver>());
  memory_resource a{0};
  memory_resource b;  // device 0 by default
  EXPECT_TRUE(a == b);
  EXPECT_EQ(&a.get_pool(), &device_pool(0));
  void* q = a.allocate_sync(MiB);
  EXPECT_TRUE(device_pool(0).owns(q));
  b.deallocate_sync(q, MiB);
  EXPECT_EQ(device_pool(0).stats().live_allocations, 0u);
  EXPECT_THROW(memory_resource{7}, error) << "a device sim does not have";
}

}  // namespace
}  // namespace tidepool

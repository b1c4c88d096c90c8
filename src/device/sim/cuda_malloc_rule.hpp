// What one cuMemAlloc (cudaMalloc) holds on an H200, driver 580, as measured directly
// (tools/measure_cudamalloc_footprint.py; docs/RESULTS.md, section 5):
//   - up to 1 MiB: allocations share 2 MiB pages, floor(2 MiB / size) to a page, the size rounded
//     up only to 512 B (cudaMalloc's alignment); a page is held while any allocation in it lives;
//   - above 1 MiB: the size rounded up to 2 MiB, in pages of its own.
// The simulated driver's mem_alloc packs allocations by this rule, and the replay's `exact` and
// `cupy` baselines count what they hold by it. Measured one size at a time; that sizes fitting
// the same number to a page share pages, and that the lowest open page is filled first, is the
// simulation's assumption.
#pragma once

#include <algorithm>
#include <cstddef>

namespace tidepool::detail {

inline constexpr std::size_t cuda_malloc_page = std::size_t{2} << 20;
inline constexpr std::size_t cuda_malloc_alignment = 512;
inline constexpr std::size_t cuda_malloc_largest_shared = std::size_t{1} << 20;

/// Whether an allocation of `bytes` shares 2 MiB pages with others.
constexpr bool cuda_malloc_shares_pages(std::size_t bytes) noexcept { return bytes <= cuda_malloc_largest_shared; }

/// How many allocations of `bytes` (at most 1 MiB) one page holds: floor(2 MiB / size rounded up to 512 B).
constexpr std::size_t cuda_malloc_per_page(std::size_t bytes) noexcept {
  const std::size_t slot = (std::max<std::size_t>(bytes, 1) + cuda_malloc_alignment - 1) / cuda_malloc_alignment *
                           cuda_malloc_alignment;
  return cuda_malloc_page / slot;
}

/// What an allocation of more than 1 MiB holds: the size rounded up to whole pages.
constexpr std::size_t cuda_malloc_whole_pages(std::size_t bytes) noexcept {
  return (bytes + cuda_malloc_page - 1) / cuda_malloc_page * cuda_malloc_page;
}

}  // namespace tidepool::detail

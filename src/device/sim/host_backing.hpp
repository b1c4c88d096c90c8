// Host memory standing in for device memory, so that aliasing on the simulated GPU is real.
//
// A reservation is an inaccessible (PROT_NONE) range of host address space; a physical handle is
// a memfd; mapping a handle maps its memfd shared and read/write at a fixed address inside the
// reservation, so two mappings of one handle really share bytes; unmapping puts inaccessible
// memory back. Every function reports failure by its return value and never throws.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tidepool::detail {

/// Reserves `size` bytes of inaccessible host address space aligned to `alignment` (a power of two
/// or any multiple of the page size). Returns 0 on failure.
[[nodiscard]] std::uintptr_t host_reserve(std::size_t size, std::size_t alignment) noexcept;
/// Gives a range from host_reserve (or host_allocate) back to the system.
void host_release_range(std::uintptr_t address, std::size_t size) noexcept;
/// A memfd of `size` bytes standing for one physical handle; -1 on failure.
[[nodiscard]] int host_create_memory(std::size_t size) noexcept;
/// A new descriptor (close-on-exec) for the same memory as `memfd`; -1 on failure.
[[nodiscard]] int host_share_memory(int memfd) noexcept;
/// The size of the memory behind descriptor `fd`; 0 when it is not a memory file (or on failure).
[[nodiscard]] std::size_t host_memory_size(int fd) noexcept;
/// Closes a memfd from host_create_memory.
void host_destroy_memory(int memfd) noexcept;
/// Maps `memfd` shared and read/write over [address, address + size). False on failure.
[[nodiscard]] bool host_map(std::uintptr_t address, std::size_t size, int memfd) noexcept;
/// Makes [address, address + size) inaccessible again (the range stays reserved).
void host_unmap(std::uintptr_t address, std::size_t size) noexcept;
/// Private read/write host memory for a plain allocation; 0 on failure.
[[nodiscard]] std::uintptr_t host_allocate(std::size_t size) noexcept;
/// `size` rounded up to whole host pages.
[[nodiscard]] std::size_t host_page_round(std::size_t size) noexcept;

}  // namespace tidepool::detail

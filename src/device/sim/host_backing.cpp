// Host backing of the simulated GPU with mmap and memfd (Linux).
#include "device/sim/host_backing.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace tidepool::detail {
namespace {

std::size_t page_size() noexcept {
  static const std::size_t size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

std::uintptr_t round_up(std::uintptr_t value, std::size_t multiple) noexcept {
  return (value + multiple - 1) / multiple * multiple;
}

void* as_pointer(std::uintptr_t address) noexcept { return reinterpret_cast<void*>(address); }

}  // namespace

std::size_t host_page_round(std::size_t size) noexcept { return round_up(size, page_size()); }

std::uintptr_t host_reserve(std::size_t size, std::size_t alignment) noexcept {
  if (alignment < page_size()) alignment = page_size();
  // Over-reserve by the alignment, then give back the unaligned head and the unused tail.
  const std::size_t padded = size + alignment;
  if (padded < size) return 0;
  void* base = ::mmap(nullptr, padded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return 0;
  const auto start = reinterpret_cast<std::uintptr_t>(base);
  const std::uintptr_t aligned = round_up(start, alignment);
  if (aligned > start) ::munmap(base, aligned - start);
  const std::uintptr_t end = aligned + size;
  const std::uintptr_t padded_end = start + padded;
  if (padded_end > end) ::munmap(as_pointer(end), padded_end - end);
  return aligned;
}

void host_release_range(std::uintptr_t address, std::size_t size) noexcept {
  if (address != 0 && size != 0) ::munmap(as_pointer(address), size);
}

namespace {

// Each handle holds a file descriptor, and a simulated GPU of a few GiB in 2 MiB handles needs more
// than the usual soft limit of 1024: raise the soft limit to the hard one (once, when first hit).
bool raise_descriptor_limit() noexcept {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return false;
  limit.rlim_cur = limit.rlim_max;
  return ::setrlimit(RLIMIT_NOFILE, &limit) == 0;
}

}  // namespace

int host_create_memory(std::size_t size) noexcept {
  int memfd = ::memfd_create("tidepool-sim-handle", MFD_CLOEXEC);
  if (memfd < 0 && errno == EMFILE && raise_descriptor_limit()) {
    memfd = ::memfd_create("tidepool-sim-handle", MFD_CLOEXEC);
  }
  if (memfd < 0) return -1;
  if (::ftruncate(memfd, static_cast<off_t>(size)) != 0) {
    ::close(memfd);
    return -1;
  }
  return memfd;
}

int host_share_memory(int memfd) noexcept {
  int shared = ::fcntl(memfd, F_DUPFD_CLOEXEC, 0);
  if (shared < 0 && errno == EMFILE && raise_descriptor_limit()) shared = ::fcntl(memfd, F_DUPFD_CLOEXEC, 0);
  return shared;
}

std::size_t host_memory_size(int fd) noexcept {
  struct stat status {};
  if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode) || status.st_size <= 0) return 0;
  return static_cast<std::size_t>(status.st_size);
}

void host_destroy_memory(int memfd) noexcept {
  if (memfd >= 0) ::close(memfd);
}

bool host_map(std::uintptr_t address, std::size_t size, int memfd) noexcept {
  void* mapped = ::mmap(as_pointer(address), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memfd, 0);
  return mapped != MAP_FAILED;
}

void host_unmap(std::uintptr_t address, std::size_t size) noexcept {
  // MAP_FIXED replaces the shared mapping atomically, so the range never becomes free for others.
  ::mmap(as_pointer(address), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

std::uintptr_t host_allocate(std::size_t size) noexcept {
  void* base = ::mmap(nullptr, host_page_round(size), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return base == MAP_FAILED ? 0 : reinterpret_cast<std::uintptr_t>(base);
}

}  // namespace tidepool::detail

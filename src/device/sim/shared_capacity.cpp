// The capacity several processes' simulated GPUs share: a file of per-process slots under flock
// (shared_capacity.hpp says why).
#include "device/sim/shared_capacity.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include <fmt/format.h>

#include "tidepool/errors.hpp"

namespace tidepool::detail {
namespace {

constexpr std::size_t file_bytes = sizeof(sim_shared_capacity::slot) * sim_shared_capacity::slot_count;

bool alive(std::int64_t pid) noexcept {
  if (pid <= 0 || pid > 0x3fffffff) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

[[noreturn]] void fail(const std::string& path, const char* what) {
  throw error(error_code::invalid_argument,
              fmt::format("sim shared capacity: {} {}: {}", what, path, std::strerror(errno)));
}

}  // namespace

sim_shared_capacity::sim_shared_capacity(const std::string& directory, const std::string& uuid)
    : path_(fmt::format("{}/tidepool-sim-{}-{}", directory, ::geteuid(), uuid)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) fail(path_, "cannot open");
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    ::close(fd_);
    errno = EPERM;
    fail(path_, "refusing (not a regular file of this user)");
  }
  lock();
  if (static_cast<std::size_t>(st.st_size) < file_bytes && ::ftruncate(fd_, static_cast<off_t>(file_bytes)) != 0) {
    unlock();
    ::close(fd_);
    fail(path_, "cannot size");
  }
  void* mapped = ::mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (mapped == MAP_FAILED) {
    unlock();
    ::close(fd_);
    fail(path_, "cannot map");
  }
  slots_ = static_cast<slot*>(mapped);
  const auto me = static_cast<std::int64_t>(::getpid());
  for (std::size_t i = 0; i < slot_count; ++i) {
    const std::int64_t pid = slots_[i].pid.load(std::memory_order_acquire);
    if (!alive(pid)) {
      slots_[i].bytes.store(0, std::memory_order_relaxed);
      slots_[i].pid.store(me, std::memory_order_release);
      mine_ = i;
      break;
    }
  }
  unlock();
  if (mine_ == slot_count) {
    ::munmap(slots_, file_bytes);
    ::close(fd_);
    errno = EBUSY;
    fail(path_, "no free slot (256 live processes) in");
  }
}

sim_shared_capacity::~sim_shared_capacity() {
  lock();
  slots_[mine_].bytes.store(0, std::memory_order_relaxed);
  slots_[mine_].pid.store(0, std::memory_order_release);
  unlock();
  ::munmap(slots_, file_bytes);
  ::close(fd_);
}

std::size_t sim_shared_capacity::others_bytes() const noexcept {
  std::size_t sum = 0;
  for (std::size_t i = 0; i < slot_count; ++i) {
    if (i == mine_) continue;
    const std::int64_t pid = slots_[i].pid.load(std::memory_order_acquire);
    if (pid == 0 || !alive(pid)) continue;
    const std::uint64_t bytes = slots_[i].bytes.load(std::memory_order_relaxed);
    sum = bytes > SIZE_MAX - sum ? SIZE_MAX : sum + static_cast<std::size_t>(bytes);
  }
  return sum;
}

void sim_shared_capacity::publish(std::size_t bytes) noexcept {
  slots_[mine_].bytes.store(bytes, std::memory_order_release);
}

void sim_shared_capacity::lock() noexcept {
  while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
  }
}

void sim_shared_capacity::unlock() noexcept { (void)::flock(fd_, LOCK_UN); }

}  // namespace tidepool::detail

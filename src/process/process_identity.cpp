// A process's identity for the ledger: pid and start time, read from /proc/PID/stat.
#include "process/process_identity.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace tidepool::detail {

std::optional<std::uint64_t> process_start_time(std::uint64_t pid) noexcept {
  if (pid == 0 || pid > largest_pid) return std::nullopt;
  char path[40];
  std::snprintf(path, sizeof path, "/proc/%llu/stat", static_cast<unsigned long long>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char text[1024];
  ssize_t got = 0;
  do {
    got = ::read(fd, text, sizeof text - 1);
  } while (got < 0 && errno == EINTR);
  ::close(fd);
  if (got <= 0) return std::nullopt;
  text[got] = '\0';
  // Field 2, the command, is in parentheses and may hold spaces or ')': fields are counted from
  // the last ')'. The first token after it is field 3, so field 22 is token 19.
  const char* p = std::strrchr(text, ')');
  if (p == nullptr) return std::nullopt;
  ++p;
  for (int token = 0;; ++token) {
    while (*p == ' ') ++p;
    if (*p == '\0') return std::nullopt;
    // Field 3, the state: a zombie (Z) or dead (X) process is gone though its pid is not free yet.
    if (token == 0 && (*p == 'Z' || *p == 'X')) return std::nullopt;
    if (token == 19) break;
    while (*p != ' ' && *p != '\0') ++p;
  }
  std::uint64_t value = 0;
  bool digits = false;
  for (; *p >= '0' && *p <= '9'; ++p) {
    digits = true;
    value = value * 10 + static_cast<std::uint64_t>(*p - '0');
  }
  if (!digits) return std::nullopt;
  return value;
}

std::uint64_t own_start_time() noexcept {
  static std::atomic<std::uint64_t> cached_pid{0};
  static std::atomic<std::uint64_t> cached_time{0};
  const auto pid = static_cast<std::uint64_t>(::getpid());
  if (cached_pid.load(std::memory_order_acquire) == pid) return cached_time.load(std::memory_order_relaxed);
  const std::uint64_t time = process_start_time(pid).value_or(0);
  cached_time.store(time, std::memory_order_relaxed);
  cached_pid.store(pid, std::memory_order_release);
  return time;
}

bool owner_alive(std::uint64_t owner) noexcept {
  const std::uint64_t pid = owner >> 32;
  if (pid == 0 || pid > largest_pid) return false;
  const auto start = process_start_time(pid);
  return start && (*start & 0xffffffffULL) == (owner & 0xffffffffULL);
}

std::uint64_t monotonic_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace tidepool::detail

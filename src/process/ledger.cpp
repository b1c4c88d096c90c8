// One GPU's ledger: opening and validating the file, this process's slot, reading the others'
// entries and the request/answer exchange (ledger.hpp says what is validated and why).
#include "process/ledger.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "process/process_identity.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::detail {
namespace {

// Figures above this (1 PiB) are no GPU's: a slot that claims them holds garbage.
constexpr std::uint64_t most_bytes = std::uint64_t{1} << 50;
// A request lock whose deadline lies further ahead than this is garbage, not an asker's.
constexpr std::uint64_t longest_request_ns = 60ULL * 1000 * 1000 * 1000;
// How long an opener waits for a creator to size the file and write its header.
constexpr auto creation_wait = std::chrono::milliseconds(200);

std::uint32_t* futex_word(std::atomic<std::uint32_t>& word) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  return reinterpret_cast<std::uint32_t*>(&word);
}

// Shared (not FUTEX_PRIVATE): the word lives in a mapping other processes share.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen, std::uint64_t timeout_ns) noexcept {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout_ns / 1000000000ULL);
  ts.tv_nsec = static_cast<long>(timeout_ns % 1000000000ULL);
  (void)::syscall(SYS_futex, futex_word(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>& word) noexcept {
  (void)::syscall(SYS_futex, futex_word(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw error(error_code::unavailable, fmt::format("tidepool: ledger {} refused: {}", path, why));
}

std::uint64_t uuid_half(const device_uuid_bytes& uuid, std::size_t half) noexcept {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i) value |= static_cast<std::uint64_t>(uuid[half * 8 + i]) << (8 * i);
  return value;
}

device_uuid_bytes uuid_from(std::uint64_t low, std::uint64_t high) noexcept {
  device_uuid_bytes uuid{};
  for (std::size_t i = 0; i < 8; ++i) {
    uuid[i] = static_cast<std::uint8_t>(low >> (8 * i));
    uuid[8 + i] = static_cast<std::uint8_t>(high >> (8 * i));
  }
  return uuid;
}

std::string file_prefix() { return fmt::format("tidepool-ledger-{}-", ::geteuid()); }

// flock on the ledger's file: joining and removing the file are one step each. The kernel drops
// it when a process dies.
class file_lock {
 public:
  explicit file_lock(int fd) noexcept : fd_(fd) {
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~file_lock() { (void)::flock(fd_, LOCK_UN); }
  file_lock(const file_lock&) = delete;
  file_lock& operator=(const file_lock&) = delete;

 private:
  int fd_;
};

bool file_removed(int fd) noexcept {
  struct stat st {};
  return ::fstat(fd, &st) != 0 || st.st_nlink == 0;
}

std::uint64_t own_owner() noexcept { return owner_word(static_cast<std::uint64_t>(::getpid()), own_start_time()); }

}  // namespace

std::string ledger::path_of(const std::string& directory, const device_uuid_bytes& uuid) {
  return fmt::format("{}/{}{}", directory, file_prefix(), to_string(uuid));
}

std::vector<std::string> ledger::list(const std::string& directory) {
  std::vector<std::string> paths;
  DIR* dir = ::opendir(directory.c_str());
  if (dir == nullptr) return paths;
  const std::string prefix = file_prefix();
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) == 0) paths.push_back(directory + "/" + name);
  }
  ::closedir(dir);
  std::sort(paths.begin(), paths.end());
  return paths;
}

ledger::ledger(std::string path, int fd, void* base, const device_uuid_bytes& uuid)
    : path_(std::move(path)), fd_(fd), base_(base), uuid_(uuid) {}

ledger::~ledger() {
  ::munmap(base_, ledger_file_bytes);
  ::close(fd_);
}

ledger_slot& ledger::slot_at(std::size_t index) const noexcept {
  auto* slots = reinterpret_cast<ledger_slot*>(static_cast<char*>(base_) + sizeof(ledger_header));
  return slots[index];
}

namespace {

// Checks an open file and maps it; `expected` is the GPU it must be (nullptr: any). Closes `fd`
// and throws when the file is refused.
std::unique_ptr<ledger> validate_and_map(const std::string& path, int fd, const device_uuid_bytes* expected,
                                         std::unique_ptr<ledger> (*make)(std::string, int, void*,
                                                                         const device_uuid_bytes&)) {
  struct closer {
    int fd;
    void* base = nullptr;
    bool keep = false;
    ~closer() {
      if (keep) return;
      if (base != nullptr) ::munmap(base, ledger_file_bytes);
      ::close(fd);
    }
  } guard{fd};
  struct stat st {};
  const auto give_up = std::chrono::steady_clock::now() + creation_wait;
  for (;;) {
    if (::fstat(fd, &st) != 0) refuse(path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) refuse(path, "not a regular file");
    if (st.st_uid != ::geteuid()) refuse(path, fmt::format("owned by uid {}, not by this user ({})", st.st_uid, ::geteuid()));
    if ((st.st_mode & 07777) != 0600) refuse(path, fmt::format("mode {:o}, not 600", st.st_mode & 07777));
    // A file of size 0 is being created by another process: give it a moment to size it.
    if (st.st_size != 0 || std::chrono::steady_clock::now() > give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (static_cast<std::size_t>(st.st_size) != ledger_file_bytes) {
    refuse(path, fmt::format("{} bytes, not the {} of ledger version {}", st.st_size, ledger_file_bytes, ledger_version));
  }
  guard.base = ::mmap(nullptr, ledger_file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (guard.base == MAP_FAILED) {
    guard.base = nullptr;
    refuse(path, fmt::format("cannot map it: {}", std::strerror(errno)));
  }
  auto* header = static_cast<ledger_header*>(guard.base);
  while (header->magic.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (header->magic.load(std::memory_order_acquire) != ledger_magic) refuse(path, "not a tidepool ledger (bad magic)");
  if (header->version.load() != ledger_version || header->header_bytes.load() != sizeof(ledger_header) ||
      header->slot_bytes.load() != sizeof(ledger_slot) || header->slot_count.load() != ledger_slot_count) {
    refuse(path, fmt::format("version {} with {}-byte slots x {}; this library reads version {} ({} x {})",
                             header->version.load(), header->slot_bytes.load(), header->slot_count.load(),
                             ledger_version, sizeof(ledger_slot), ledger_slot_count));
  }
  const device_uuid_bytes uuid = uuid_from(header->uuid_low.load(), header->uuid_high.load());
  if (expected != nullptr && uuid != *expected) {
    refuse(path, fmt::format("it is the ledger of {}, not of {}", to_string(uuid), to_string(*expected)));
  }
  guard.keep = true;
  return make(path, fd, guard.base, uuid);
}

}  // namespace

std::unique_ptr<ledger> ledger::open_existing(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) refuse(path, std::strerror(errno));
  return validate_and_map(path, fd, nullptr, [](std::string p, int f, void* b, const device_uuid_bytes& u) {
    return std::unique_ptr<ledger>(new ledger(std::move(p), f, b, u));
  });
}

std::unique_ptr<ledger> ledger::open_or_create(const std::string& directory, const device_uuid_bytes& uuid) {
  const std::string path = path_of(directory, uuid);
  auto make = [](std::string p, int f, void* b, const device_uuid_bytes& u) {
    return std::unique_ptr<ledger>(new ledger(std::move(p), f, b, u));
  };
  for (int attempt = 0; attempt < 4; ++attempt) {
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) return validate_and_map(path, fd, &uuid, make);
    if (errno != ENOENT) refuse(path, std::strerror(errno));
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      if (errno == EEXIST) continue;  // another process created it first: open theirs
      refuse(path, fmt::format("cannot create it: {}", std::strerror(errno)));
    }
    // The umask may only take bits away; 0600 is set outright so the mode check passes.
    if (::fchmod(fd, 0600) != 0 || ::ftruncate(fd, static_cast<off_t>(ledger_file_bytes)) != 0) {
      const int saved = errno;
      ::close(fd);
      ::unlink(path.c_str());
      refuse(path, fmt::format("cannot size it: {}", std::strerror(saved)));
    }
    void* base = ::mmap(nullptr, ledger_file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      const int saved = errno;
      ::close(fd);
      ::unlink(path.c_str());
      refuse(path, fmt::format("cannot map it: {}", std::strerror(saved)));
    }
    auto* header = static_cast<ledger_header*>(base);  // zero-filled by ftruncate
    header->version.store(ledger_version);
    header->header_bytes.store(sizeof(ledger_header));
    header->slot_bytes.store(sizeof(ledger_slot));
    header->slot_count.store(ledger_slot_count);
    header->uuid_low.store(uuid_half(uuid, 0));
    header->uuid_high.store(uuid_half(uuid, 1));
    header->magic.store(ledger_magic, std::memory_order_release);
    return make(path, fd, base, uuid);
  }
  refuse(path, "created and removed again by other processes four times over");
}

std::optional<std::size_t> ledger::claim(bool gives) {
  const std::uint64_t me = own_owner();
  if (own_start_time() == 0) return std::nullopt;  // /proc unreadable: others would take us for gone
  const file_lock lock(fd_);
  if (file_removed(fd_)) {
    unlinked_ = true;
    return std::nullopt;
  }
  (void)entries();  // cleans the slots of processes that are gone
  for (std::size_t i = 0; i < ledger_slot_count; ++i) {
    ledger_slot& s = slot_at(i);
    std::uint64_t expected = 0;
    if (!s.owner.compare_exchange_strong(expected, me, std::memory_order_acq_rel)) continue;
    s.start_time.store(own_start_time());
    s.held_bytes.store(0);
    s.in_use_bytes.store(0);
    s.cached_bytes.store(0);
    s.flags.store(gives ? ledger_flag_gives : 0);
    s.served_requests.store(0);
    s.served_bytes.store(0);
    s.request_lock.store(0);
    s.answer_bytes.store(0);
    // No request is pending in a fresh slot, whatever the last owner left.
    s.answer_seq.store(s.request_seq.load(std::memory_order_acquire), std::memory_order_release);
    s.updated_ns.store(monotonic_ns(), std::memory_order_release);
    return i;
  }
  return std::nullopt;
}

bool ledger::holds(std::size_t slot) const noexcept {
  return slot < ledger_slot_count && slot_at(slot).owner.load(std::memory_order_acquire) == own_owner();
}

void ledger::publish(std::size_t slot, std::uint64_t held, std::uint64_t in_use, std::uint64_t cached,
                     bool gives) noexcept {
  if (!holds(slot)) return;
  ledger_slot& s = slot_at(slot);
  s.held_bytes.store(held, std::memory_order_relaxed);
  s.in_use_bytes.store(in_use, std::memory_order_relaxed);
  s.cached_bytes.store(cached, std::memory_order_relaxed);
  s.flags.store(gives ? ledger_flag_gives : 0, std::memory_order_relaxed);
  s.updated_ns.store(monotonic_ns(), std::memory_order_release);
}

void ledger::leave(std::size_t slot) noexcept {
  if (slot >= ledger_slot_count) return;
  std::uint64_t me = own_owner();
  if (slot_at(slot).owner.compare_exchange_strong(me, 0, std::memory_order_acq_rel)) (void)remove_if_empty();
}

bool ledger::remove_if_empty() noexcept {
  const file_lock lock(fd_);
  if (file_removed(fd_)) return false;
  try {
    if (!entries().empty()) return false;
  } catch (...) {
    return false;
  }
  return ::unlink(path_.c_str()) == 0;
}

std::uint32_t ledger::current_request(std::size_t slot) const noexcept {
  return slot < ledger_slot_count ? slot_at(slot).request_seq.load(std::memory_order_acquire) : 0;
}

std::optional<ledger_request> ledger::pending(std::size_t slot) const noexcept {
  if (slot >= ledger_slot_count) return std::nullopt;
  const ledger_slot& s = slot_at(slot);
  const std::uint32_t requested = s.request_seq.load(std::memory_order_acquire);
  if (requested == s.answer_seq.load(std::memory_order_acquire)) return std::nullopt;
  ledger_request r;
  r.seq = requested;
  r.bytes = std::min(s.request_bytes.load(std::memory_order_relaxed), most_bytes);
  r.from_pid = s.request_from.load(std::memory_order_relaxed);
  return r;
}

void ledger::answer(std::size_t slot, std::uint32_t seq, std::uint64_t bytes) noexcept {
  if (slot >= ledger_slot_count) return;
  ledger_slot& s = slot_at(slot);
  s.answer_bytes.store(bytes, std::memory_order_relaxed);
  s.served_requests.fetch_add(1, std::memory_order_relaxed);
  s.served_bytes.fetch_add(bytes, std::memory_order_relaxed);
  s.answer_seq.store(seq, std::memory_order_release);
  futex_wake(s.answer_seq);
}

void ledger::wait_for_request(std::size_t slot, std::uint32_t seen, std::uint64_t timeout_ns) const noexcept {
  if (slot >= ledger_slot_count) return;
  futex_wait(slot_at(slot).request_seq, seen, timeout_ns);
}

void ledger::wake(std::size_t slot) noexcept {
  if (slot < ledger_slot_count) futex_wake(slot_at(slot).request_seq);
}

std::vector<ledger_entry> ledger::entries() {
  std::vector<ledger_entry> found;
  for (std::size_t i = 0; i < ledger_slot_count; ++i) {
    ledger_slot& s = slot_at(i);
    std::uint64_t owner = s.owner.load(std::memory_order_acquire);
    if (owner == 0) continue;
    if (!owner_alive(owner)) {
      // Gone (or garbage): free the slot, unless someone changed it meanwhile.
      (void)s.owner.compare_exchange_strong(owner, 0, std::memory_order_acq_rel);
      continue;
    }
    ledger_entry e;
    e.slot = i;
    e.owner = owner;
    e.pid = owner >> 32;
    e.start_time = s.start_time.load(std::memory_order_relaxed);
    e.held_bytes = s.held_bytes.load(std::memory_order_relaxed);
    e.in_use_bytes = s.in_use_bytes.load(std::memory_order_relaxed);
    e.cached_bytes = s.cached_bytes.load(std::memory_order_relaxed);
    e.gives = (s.flags.load(std::memory_order_relaxed) & ledger_flag_gives) != 0;
    e.updated_ns = s.updated_ns.load(std::memory_order_relaxed);
    e.served_requests = s.served_requests.load(std::memory_order_relaxed);
    e.served_bytes = std::min(s.served_bytes.load(std::memory_order_relaxed), most_bytes);
    e.figures_valid = e.held_bytes <= most_bytes && e.in_use_bytes <= e.held_bytes && e.cached_bytes <= e.held_bytes;
    if (!e.figures_valid) e.held_bytes = e.in_use_bytes = e.cached_bytes = 0;
    if (s.owner.load(std::memory_order_acquire) != owner) continue;  // changed hands while read
    found.push_back(e);
  }
  return found;
}

ask_result ledger::ask(const ledger_entry& whom, std::uint64_t bytes, std::uint64_t deadline_ns,
                       const std::function<bool()>& enough) {
  ask_result result;
  const std::uint64_t start = monotonic_ns();
  if (whom.slot >= ledger_slot_count) return result;
  ledger_slot& s = slot_at(whom.slot);
  if (s.owner.load(std::memory_order_acquire) != whom.owner) return result;
  const auto me = static_cast<std::uint64_t>(::getpid());
  std::uint64_t lock = s.request_lock.load(std::memory_order_acquire);
  if (lock != 0) {
    const std::uint64_t until = s.request_deadline_ns.load(std::memory_order_relaxed);
    // Abandoned: past its deadline, a deadline no asker sets, or an asker that died.
    const bool abandoned = until <= start || until - start > longest_request_ns || lock > largest_pid ||
                           !process_start_time(lock).has_value();
    if (!abandoned) {
      result.outcome = ask_outcome::busy;
      return result;
    }
    if (!s.request_lock.compare_exchange_strong(lock, 0, std::memory_order_acq_rel)) {
      result.outcome = ask_outcome::busy;
      return result;
    }
  }
  std::uint64_t free_lock = 0;
  if (!s.request_lock.compare_exchange_strong(free_lock, me, std::memory_order_acq_rel)) {
    result.outcome = ask_outcome::busy;
    return result;
  }
  s.request_deadline_ns.store(deadline_ns, std::memory_order_relaxed);
  s.request_bytes.store(std::min(bytes, most_bytes), std::memory_order_relaxed);
  s.request_from.store(me, std::memory_order_relaxed);
  // One past the last request (one taken over may still be in progress: its answer must not pass
  // for ours), and never the answer already there.
  std::uint32_t seq = s.request_seq.load(std::memory_order_acquire) + 1;
  if (seq == s.answer_seq.load(std::memory_order_acquire)) ++seq;
  s.request_seq.store(seq, std::memory_order_release);
  futex_wake(s.request_seq);
  result.outcome = ask_outcome::timed_out;
  for (bool first = true;; first = false) {
    const std::uint32_t answered = s.answer_seq.load(std::memory_order_acquire);
    if (answered == seq) {
      result.outcome = ask_outcome::answered;
      result.bytes = std::min(s.answer_bytes.load(std::memory_order_relaxed), most_bytes);
      break;
    }
    if (s.owner.load(std::memory_order_acquire) != whom.owner || (!first && !owner_alive(whom.owner))) {
      result.outcome = ask_outcome::gone;
      break;
    }
    if (!first && enough && enough()) {
      result.outcome = ask_outcome::enough;
      break;
    }
    const std::uint64_t now = monotonic_ns();
    if (now >= deadline_ns) break;
    // Slices of at most 10 ms, so an owner that died meanwhile is noticed (1 ms when `enough`
    // is asked).
    const std::uint64_t slice = enough ? 1'000'000 : 10'000'000;
    futex_wait(s.answer_seq, answered, std::min<std::uint64_t>(deadline_ns - now, slice));
  }
  std::uint64_t mine = me;
  (void)s.request_lock.compare_exchange_strong(mine, 0, std::memory_order_acq_rel);
  result.waited_ns = monotonic_ns() - start;
  return result;
}

}  // namespace tidepool::detail

// ledger.hpp: one GPU's ledger (issue 14): the shared-memory file, one per user and GPU UUID, in
// which the user's tidepool processes on that GPU publish what they hold and ask each other to
// hand cached memory back. The layout is ledger_layout.hpp; the process-wide use of it (when a
// process joins, who serves its requests, when it asks) is sharing.hpp.
//
// Safety, since any process of the user may write anything into the file:
// - opened only when it is a regular file of this user with mode 0600 and the exact size, not
//   through a symbolic link; a header of another magic, version, layout or GPU is refused;
// - every slot read is validated: an owner word must name a running process (pid in range, start
//   time matching /proc/PID/stat), else the slot is cleaned (compare-and-swap to free); figures
//   that contradict each other (in use or cached above held, held above 1 PiB) are marked invalid;
// - waits are bounded by the waiter's own deadline, never by a value read from the file; a request
//   lock whose deadline has passed is taken over, one whose deadline lies in the future makes the
//   asker pass that process by, not wait for it;
// - the bytes a request names are only a hint to the process that serves it, which hands back
//   cached memory only (sharing.cpp), never live data.
// Processes of other users are never seen: each user has a file of their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "process/ledger_layout.hpp"
#include "tidepool/driver.hpp"

namespace tidepool::detail {

/// A validated copy of one live process's entry.
struct ledger_entry {
  std::size_t slot = 0;
  std::uint64_t owner = 0;
  std::uint64_t pid = 0;
  std::uint64_t start_time = 0;
  bool figures_valid = true;  ///< false: the figures below contradicted each other (shown as 0)
  std::uint64_t held_bytes = 0;
  std::uint64_t in_use_bytes = 0;
  std::uint64_t cached_bytes = 0;
  bool gives = false;
  std::uint64_t updated_ns = 0;
  std::uint64_t served_requests = 0;
  std::uint64_t served_bytes = 0;
};

/// How one request ended.
enum class ask_outcome : std::uint8_t {
  answered,   ///< the process answered in time
  busy,       ///< another asker holds its request slot (not waited for)
  timed_out,  ///< no answer before the deadline
  enough,     ///< the asker's `enough` said so before the answer came (the owner goes on)
  gone,       ///< the process left or died meanwhile
};

struct ask_result {
  ask_outcome outcome = ask_outcome::gone;
  std::uint64_t bytes = 0;   ///< what it says it handed back (a claim, not a figure to trust)
  std::uint64_t waited_ns = 0;
};

/// A request waiting in this process's own slot.
struct ledger_request {
  std::uint32_t seq = 0;
  std::uint64_t bytes = 0;
  std::uint64_t from_pid = 0;
};

class ledger {
 public:
  /// The file of `uuid` for this user: "<directory>/tidepool-ledger-<uid>-GPU-...".
  [[nodiscard]] static std::string path_of(const std::string& directory, const device_uuid_bytes& uuid);
  /// Every ledger file of this user in `directory` (by name; not yet validated).
  [[nodiscard]] static std::vector<std::string> list(const std::string& directory);

  /// Opens the ledger of `uuid` in `directory`, creating it (mode 0600) when there is none.
  /// Throws tidepool::error (unavailable) saying why a file is refused.
  [[nodiscard]] static std::unique_ptr<ledger> open_or_create(const std::string& directory,
                                                              const device_uuid_bytes& uuid);
  /// Opens an existing ledger file (for `tidepool top` and `trim`); refused as above.
  [[nodiscard]] static std::unique_ptr<ledger> open_existing(const std::string& path);

  ~ledger();
  ledger(const ledger&) = delete;
  ledger& operator=(const ledger&) = delete;

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] const device_uuid_bytes& uuid() const noexcept { return uuid_; }

  // --- this process's own slot ---
  /// Takes a free slot (dead processes' slots are cleaned first) for this process; nullopt when
  /// all are taken by running processes, or when the file was removed meanwhile (unlinked()).
  [[nodiscard]] std::optional<std::size_t> claim(bool gives);
  /// Whether the file was removed (by the last process leaving) before claim() took a slot: open
  /// the ledger again.
  [[nodiscard]] bool unlinked() const noexcept { return unlinked_; }
  /// Removes the file when no running process is in it (under its lock, as claim() takes slots,
  /// so no process joins a removed file). Returns whether it was removed.
  bool remove_if_empty() noexcept;
  /// Whether `slot` still names this process (a hostile write may have taken it).
  [[nodiscard]] bool holds(std::size_t slot) const noexcept;
  void publish(std::size_t slot, std::uint64_t held, std::uint64_t in_use, std::uint64_t cached, bool gives) noexcept;
  /// Frees `slot` if it is still this process's, and removes the file if that left it empty.
  void leave(std::size_t slot) noexcept;
  /// The sequence number of the last request made to `slot` (what wait_for_request waits past).
  [[nodiscard]] std::uint32_t current_request(std::size_t slot) const noexcept;
  /// The request waiting in `slot`, if any.
  [[nodiscard]] std::optional<ledger_request> pending(std::size_t slot) const noexcept;
  /// Answers request `seq` with the bytes handed back, and wakes the asker.
  void answer(std::size_t slot, std::uint32_t seq, std::uint64_t bytes) noexcept;
  /// Sleeps until a request arrives in `slot` (its sequence number moves from `seen`), wake() is
  /// called, or `timeout_ns` pass.
  void wait_for_request(std::size_t slot, std::uint32_t seen, std::uint64_t timeout_ns) const noexcept;
  /// Wakes the thread waiting in wait_for_request (to stop it).
  void wake(std::size_t slot) noexcept;

  // --- the others ---
  /// The running processes' entries; slots of processes that are gone (or hold garbage) are
  /// cleaned on the way.
  [[nodiscard]] std::vector<ledger_entry> entries();
  /// Asks the process of `whom` to hand back `bytes`, waiting until `deadline_ns`
  /// (monotonic_ns()) at the latest, or, when `enough` is given, until it returns true (checked
  /// every millisecond: a process releasing a large cache frees the first bytes long before its
  /// answer).
  [[nodiscard]] ask_result ask(const ledger_entry& whom, std::uint64_t bytes, std::uint64_t deadline_ns,
                               const std::function<bool()>& enough = {});

 private:
  ledger(std::string path, int fd, void* base, const device_uuid_bytes& uuid);
  [[nodiscard]] ledger_slot& slot_at(std::size_t index) const noexcept;

  std::string path_;
  int fd_ = -1;
  void* base_ = nullptr;
  device_uuid_bytes uuid_{};
  bool unlinked_ = false;
};

}  // namespace tidepool::detail

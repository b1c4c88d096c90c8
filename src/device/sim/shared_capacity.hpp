// shared_capacity.hpp: a simulated GPU whose capacity several processes share (opt-in,
// sim_config::shared_capacity_directory), so that one process's holdings make another's
// allocation fail, as on a real GPU.
//
// Each device is a small file named after the user and the device's UUID, with one slot per
// process: its pid and the physical bytes it holds. A process publishes its own bytes after every
// change and counts the others' live slots as taken. A process that dies holds nothing any more,
// as on a real GPU: a slot whose pid no longer exists (kill(pid, 0)) is not counted and is reused.
// Checking room and taking it happen under flock on the file, which the kernel drops when a process
// dies, so two processes cannot both take the last bytes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tidepool::detail {

class sim_shared_capacity {
 public:
  /// Opens (creating it if needed) the file of the device named `uuid` in `directory`, and takes a
  /// slot for this process. Throws tidepool::error when the file cannot be used.
  sim_shared_capacity(const std::string& directory, const std::string& uuid);
  ~sim_shared_capacity();
  sim_shared_capacity(const sim_shared_capacity&) = delete;
  sim_shared_capacity& operator=(const sim_shared_capacity&) = delete;

  /// Bytes the other live processes hold on the device now.
  [[nodiscard]] std::size_t others_bytes() const noexcept;
  /// Publishes what this process holds now.
  void publish(std::size_t bytes) noexcept;
  /// The file's lock, so a room check and the taking of that room are one step (BasicLockable).
  void lock() noexcept;
  void unlock() noexcept;
  /// The file's path.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

  struct slot {
    std::atomic<std::int64_t> pid;
    std::atomic<std::uint64_t> bytes;
  };
  static constexpr std::size_t slot_count = 256;

 private:
  std::string path_;
  int fd_ = -1;
  slot* slots_ = nullptr;
  std::size_t mine_ = slot_count;
};

}  // namespace tidepool::detail

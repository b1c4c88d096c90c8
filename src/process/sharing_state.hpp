// sharing_state.hpp: what the files of GPU sharing (issue 14) share: the process's options and
// the GPUs it has joined, each with its ledger, its slot and its helper thread. sharing.cpp joins
// and asks; ledger_server.cpp is the helper thread; sharing_options.cpp reads and sets the options.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "process/ledger.hpp"
#include "tidepool/driver.hpp"
#include "tidepool/process.hpp"

namespace tidepool::detail {

inline constexpr std::uint64_t longest_wait_ms = 60'000;
// The wait when neither TIDEPOOL_SHARING_WAIT_MS nor set_sharing_options says: the public default.
inline constexpr std::uint64_t default_wait_ms = static_cast<std::uint64_t>(sharing_options{}.wait.count());
/// How long stopping waits for a helper thread (one stuck in a hook is left behind).
inline constexpr auto stop_wait = std::chrono::seconds(1);

/// True on a helper thread: its reclaim hooks must not ask the others in turn.
extern thread_local bool on_helper_thread;

// One joined GPU. Shared by the process state and its helper thread.
struct device_share {
  int device = 0;
  std::unique_ptr<ledger> book;
  std::string refused;
  std::atomic<std::size_t> slot{0};  // moved by the helper thread when it must take a new one
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::condition_variable stopped_cv;
  bool running = false;  // under mutex
};

struct sharing_state {
  std::mutex mutex;
  bool options_read = false;
  std::string options_error;
  std::atomic<bool> enabled{true};
  std::atomic<bool> gives{true};
  std::atomic<std::uint64_t> wait_ms{default_wait_ms};
  std::uint64_t publish_ms = 100;
  std::string directory;
  std::map<int, std::shared_ptr<device_share>> devices;
  std::atomic<std::uint64_t> asks{0}, requests{0}, answered{0}, timed_out{0}, busy{0}, gone{0},
      answered_bytes{0}, last_round_trip_ns{0}, served{0};
};

/// The state, made on first use; replaced (not freed) in a forked child.
extern std::atomic<sharing_state*> current_state;
sharing_state& sharing();
/// Reads the options from the environment, once (under s.mutex).
void read_options(sharing_state& s);
/// The process's driver once a pool exists, else null.
std::shared_ptr<driver> process_driver();

/// Publishes the pool's figures in the slot of `share`.
void publish(device_share& share, bool gives) noexcept;
/// The helper thread of one joined GPU.
void serve(std::shared_ptr<device_share> share, sharing_state* s);
/// Stops every helper thread and leaves every ledger; whether all stopped in time.
bool stop_all() noexcept;

}  // namespace tidepool::detail

// replay/replay_allocator.hpp: the one interface every allocator replayed by `tidepool replay`
// sits behind: tidepool's pool and the baselines that model the allocators in use today.
//
// Each allocator is real: it asks the driver for memory (sim or cuda) exactly as the allocator it
// models would, so the driver's call counts and, on sim, its physical bytes are the allocator's
// own. An allocator also keeps its own count of the physical bytes it holds, which the replay
// compares with the driver's on sim and reports on cuda.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tidepool/driver.hpp"
#include "tidepool/pool.hpp"

namespace tidepool::replay {

/// An allocator as the replay engine drives it.
class replay_allocator {
 public:
  replay_allocator() = default;
  replay_allocator(const replay_allocator&) = delete;
  replay_allocator& operator=(const replay_allocator&) = delete;
  virtual ~replay_allocator() = default;

  /// Short name, as given to --allocators (e.g. "caching").
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  /// Allocates `bytes` for `stream`; nullopt when the device has no room (counted, not thrown).
  [[nodiscard]] virtual std::optional<device_address> allocate(std::size_t bytes, stream_t stream) = 0;
  /// Frees an allocation made by allocate() with the same `bytes`.
  virtual void deallocate(device_address address, std::size_t bytes, stream_t stream) = 0;
  /// Hands every cached byte the allocator can give back to the driver (torch.cuda.empty_cache(),
  /// cupy free_all_blocks(), cudaMemPoolTrimTo(0), tidepool::pool::release()). Returns the bytes.
  virtual std::size_t release() = 0;
  /// After release(): moves live bytes so that only what live allocations touch stays held
  /// (tidepool::pool::compact). Returns the bytes handed back; nullopt where the allocator has no
  /// such call (every baseline) or refuses it (tidepool with alias_free_handles).
  virtual std::optional<std::size_t> compact() { return std::nullopt; }
  /// Physical device memory the allocator holds from the driver, by its own count.
  [[nodiscard]] virtual std::size_t held_bytes() const noexcept = 0;
  /// What the allocator holds block by block (tidepool: pool::describe); nullopt where the
  /// allocator cannot say.
  [[nodiscard]] virtual std::optional<pool_description> describe() const { return std::nullopt; }
};

/// Names of every allocator this build can replay, tidepool first.
[[nodiscard]] std::vector<std::string> allocator_names();

/// Creates the allocator called `name` on `device` of `drv`. Throws tidepool::error
/// (invalid_argument) for an unknown name, naming it and the known ones.
[[nodiscard]] std::unique_ptr<replay_allocator> make_allocator(std::string_view name,
                                                               std::shared_ptr<driver> drv, int device,
                                                              const pool_options& tidepool_options = {});

namespace detail {
/// Turns a failed driver call into a tidepool::error naming the call and the status.
[[noreturn]] void throw_driver_failure(std::string_view allocator, driver_call call, driver_status status);
}  // namespace detail

}  // namespace tidepool::replay

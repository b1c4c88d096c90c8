// replay/tidepool_allocator.hpp: tidepool's own pool behind the replay interface, through the
// public tidepool::pool API only.
#pragma once

#include <memory>

#include "replay/replay_allocator.hpp"
#include "tidepool/pool.hpp"

namespace tidepool::replay {

/// A tidepool::pool on one device.
class tidepool_allocator final : public replay_allocator {
 public:
  /// A pool with `options` (default: what a user gets without tuning) on `device` of `drv`.
  tidepool_allocator(std::shared_ptr<driver> drv, int device, const pool_options& options = {});

  [[nodiscard]] std::string_view name() const noexcept override { return "tidepool"; }
  /// pool::allocate; tidepool::out_of_memory becomes nullopt (counted as a failure), and so does
  /// a request larger than the whole device (a trace replayed on a smaller one, `--capacity`),
  /// which the pool refuses as an invalid size.
  [[nodiscard]] std::optional<device_address> allocate(std::size_t bytes, stream_t stream) override;
  void deallocate(device_address address, std::size_t bytes, stream_t stream) override;
  /// pool::release().
  std::size_t release() override;
  /// pool::compact(); nullopt where the pool refuses it (alias_free_handles).
  std::optional<std::size_t> compact() override;
  /// pool_stats::mapped_bytes.
  [[nodiscard]] std::size_t held_bytes() const noexcept override;
  /// pool::describe().
  [[nodiscard]] std::optional<pool_description> describe() const override;

 private:
  pool pool_;
};

}  // namespace tidepool::replay

// Exporting an allocation's physical memory to another process (CUDA IPC of virtual memory), and
// the end of such an export (the other process no longer maps it).
//
// A block lies on one or more whole handles of its range, mapped side by side; the export is one
// file descriptor per handle, in address order, and where the block starts in the first. Another
// process maps the handles side by side in a range of its own (process/ipc_imports.cpp) and so
// sees the block at the same offset. The pool's lock is held throughout: the handles under a live
// block are never split, stolen or released, but the lock also keeps a concurrent free of the
// block (a program's mistake) from racing the walk. Each handle's first export is kept open by the
// page table (page_table::export_handle), so sending the same weights again costs no driver call.
// Each export counts as in use on its handles until end_export says the other process let go:
// sleep() leaves such handles awake (sleep_wake.cpp).
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "core/pool_impl.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::detail {

exported_allocation pool_impl::export_allocation(const void* ptr) {
  std::lock_guard guard(lock_);
  const block* b = live_.find(reinterpret_cast<device_address>(ptr));
  if (b == nullptr) throw_bad_pointer("export_allocation", ptr);
  std::size_t requested = b->requested;
  if (b->state == block_state::lent && !handed_out(*b, &requested)) throw_bad_pointer("export_allocation", ptr);
  if (asleep_) {
    throw error(error_code::asleep,
                fmt::format("cannot export the allocation at {}: its memory is asleep (wake it first)", ptr));
  }
  const address_range& range = *b->range;
  if (range.segment) {
    throw error(error_code::unavailable,
                fmt::format("cannot export the allocation at {}: device {} has no virtual memory API, and "
                            "memory from cuMemAlloc is shared with cudaIpcGetMemHandle, not by tidepool",
                            ptr, device_));
  }
  const std::size_t g = pages_.granularity();
  exported_allocation out;
  out.bytes = requested;
  const auto close_all = [&out] {
    for (const int fd : out.fds) ::close(fd);
    out.fds.clear();
  };
  const device_address end = b->address + std::max<std::size_t>(requested, 1);
  device_address at = b->address;
  while (at < end) {
    const std::uint32_t id = range.page_handle[(at - range.base) / g];
    const std::size_t handle_size = pages_.record(id).size;
    const device_address start = pages_.mapping_start(id, at);
    int fd = -1;
    std::uint64_t export_id = 0;
    const driver_status status = pages_.export_handle(id, &fd, &export_id);
    if (status != driver_status::success) {
      close_all();
      if (status == driver_status::not_supported) {
        throw error(error_code::unavailable,
                    fmt::format("cannot export the allocation at {}: the driver does not make device {}'s memory "
                                "shareable with other processes (no POSIX file-descriptor handles here)",
                                ptr, device_));
      }
      throw error(error_code::driver_failure,
                  fmt::format("cannot export the allocation at {}: mem_export failed ({})", ptr, to_string(status)));
    }
    if (out.fds.empty()) out.offset = static_cast<std::size_t>(b->address - start);
    out.fds.push_back(fd);
    out.handle_sizes.push_back(handle_size);
    out.handle_ids.push_back(export_id);
    at = start + handle_size;
  }
  for_each_handle_of(*b, requested, [this](std::uint32_t id) { pages_.count_export_use(id, +1); });
  return out;
}

void pool_impl::end_export(const void* ptr) {
  std::lock_guard guard(lock_);
  const block* b = live_.find(reinterpret_cast<device_address>(ptr));
  if (b == nullptr) throw_bad_pointer("end_export", ptr);
  std::size_t requested = b->requested;
  if (b->state == block_state::lent && !handed_out(*b, &requested)) throw_bad_pointer("end_export", ptr);
  if (b->range->segment) return;  // never exported
  for_each_handle_of(*b, requested, [this](std::uint32_t id) { pages_.count_export_use(id, -1); });
}

}  // namespace tidepool::detail

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
  std::size_t requested = 0;
  const block& b = handed_out_block(ptr, "export_allocation", requested);
  if (asleep_) {
    throw error(error_code::asleep,
                fmt::format("cannot export the allocation at {}: {}", ptr,
                            compacting_ ? "compact() is moving its memory on another thread"
                                        : "its memory is asleep (wake it first)"));
  }
  if (b.range->segment) {
    throw error(error_code::unavailable,
                fmt::format("cannot export the allocation at {}: device {} has no virtual memory API, and "
                            "memory from cuMemAlloc is shared with cudaIpcGetMemHandle, not by tidepool",
                            ptr, device_));
  }
  exported_allocation out;
  out.bytes = requested;
  for_each_handle_of(b, requested, [&](std::uint32_t id, device_address start) {
    int fd = -1;
    std::uint64_t export_id = 0;
    const driver_status status = pages_.export_handle(id, &fd, &export_id);
    if (status != driver_status::success) {
      for (const int opened : out.fds) ::close(opened);
      if (status == driver_status::not_supported) {
        throw error(error_code::unavailable,
                    fmt::format("cannot export the allocation at {}: the driver does not make device {}'s memory "
                                "shareable with other processes (no POSIX file-descriptor handles here)",
                                ptr, device_));
      }
      throw error(error_code::driver_failure,
                  fmt::format("cannot export the allocation at {}: mem_export failed ({})", ptr, to_string(status)));
    }
    if (out.fds.empty()) out.offset = static_cast<std::size_t>(b.address - start);
    out.fds.push_back(fd);
    out.handle_sizes.push_back(pages_.record(id).size);
    out.handle_ids.push_back(export_id);
  });
  // Counted once every handle is exported: a failed export counts for nothing.
  for_each_handle_of(b, requested, [this](std::uint32_t id, device_address) { pages_.count_export_use(id, +1); });
  return out;
}

void pool_impl::end_export(const void* ptr) {
  std::lock_guard guard(lock_);
  std::size_t requested = 0;
  const block& b = handed_out_block(ptr, "end_export", requested);
  if (b.range->segment) return;  // never exported
  for_each_handle_of(b, requested, [this](std::uint32_t id, device_address) { pages_.count_export_use(id, -1); });
}

}  // namespace tidepool::detail

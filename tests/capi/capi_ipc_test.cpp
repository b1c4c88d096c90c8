// Memory shared between processes through the C API (CUDA IPC of tidepool's virtual memory), on
// the simulated GPU backed by host memory, where an exported handle is a memory file and an
// import maps the same bytes: what the exporter wrote is what the importer reads, and the other
// way round; the import outlives the exporter's free and release; a handle goes to the driver's
// export once; bad input gets a clear status and leaves nothing open or mapped.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "process/process_fixture.hpp"
#include "tidepool/c_api.h"

namespace tidepool::testing {
namespace {

std::string last_error() { return tidepool_last_error(); }

std::size_t open_descriptors() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// What tidepool_export_memory gives, closed on destruction.
struct exported {
  std::array<uint8_t, 16> uuid{};
  std::vector<int> fds = std::vector<int>(16, -1);
  std::vector<size_t> sizes = std::vector<size_t>(16, 0);
  std::vector<uint64_t> ids = std::vector<uint64_t>(16, 0);
  size_t count = 0;
  size_t offset = 0;
  size_t bytes = 0;

  tidepool_status from(const void* ptr) {
    const tidepool_status s =
        tidepool_export_memory(ptr, uuid.data(), fds.data(), sizes.data(), ids.data(), fds.size(), &count, &offset, &bytes);
    if (s == TIDEPOOL_SUCCESS) {
      fds.resize(count);
      sizes.resize(count);
      ids.resize(count);
    }
    return s;
  }
  tidepool_status import(void** ptr) const {
    int device = -1;
    const tidepool_status s = tidepool_import_memory(uuid.data(), fds.data(), sizes.data(), count, offset, bytes, ptr, &device);
    if (s == TIDEPOOL_SUCCESS) {
      EXPECT_EQ(device, 0);
    }
    return s;
  }
  ~exported() {
    for (std::size_t i = 0; i < count && i < fds.size(); ++i) ::close(fds[i]);
  }
};

class CApiIpc : public process_test {
 protected:
  sim_driver& host_backed() {
    sim_config config;
    // 16 GiB (host memory backs only what is mapped): growth's handles as on a real GPU, up to 64
    // MiB, so the exports below lie on the few handles they expect.
    config.capacity = 16384 * MiB;
    config.back_with_host_memory = true;
    config.uuid_key = "capi-ipc-test";
    return use_sim(std::move(config));
  }
  static void* allocate(std::size_t size) {
    void* p = nullptr;
    EXPECT_EQ(tidepool_allocate(size, 0, nullptr, TIDEPOOL_SCRATCH, &p), TIDEPOOL_SUCCESS) << last_error();
    return p;
  }
  static void free(void* p) { EXPECT_EQ(tidepool_deallocate(p, 0, nullptr), TIDEPOOL_SUCCESS) << last_error(); }
};

TEST_F(CApiIpc, AnImportSeesTheExportersBytesBothWays) {
  host_backed();
  // A small allocation between others (inside a handle), and one over several handles.
  void* before = allocate(3000);
  void* small = allocate(5000);
  void* large = allocate(70 * MiB + 4096);
  for (void* p : {small, large}) {
    const std::size_t size = p == small ? 5000 : 70 * MiB + 4096;
    std::memset(p, 0x5a, size);  // sim's device memory is this process's host memory here
    exported e;
    ASSERT_EQ(e.from(p), TIDEPOOL_SUCCESS) << last_error();
    EXPECT_EQ(e.bytes, size);
    EXPECT_GE(e.count, p == small ? 1u : 2u);
    void* view = nullptr;
    ASSERT_EQ(e.import(&view), TIDEPOOL_SUCCESS) << last_error();
    ASSERT_NE(view, p) << "mapped in a range of its own";
    auto* seen = static_cast<unsigned char*>(view);
    EXPECT_EQ(seen[0], 0x5a);
    EXPECT_EQ(seen[size - 1], 0x5a);
    seen[size / 2] = 0x17;  // written through the import, read through the allocation
    EXPECT_EQ(static_cast<unsigned char*>(p)[size / 2], 0x17);
    size_t imported = 0;
    ASSERT_EQ(tidepool_imported_bytes(&imported), TIDEPOOL_SUCCESS);
    EXPECT_GE(imported, size);
    EXPECT_EQ(tidepool_close_imported_memory(view), TIDEPOOL_SUCCESS) << last_error();
  }
  size_t imported = 1;
  ASSERT_EQ(tidepool_imported_bytes(&imported), TIDEPOOL_SUCCESS);
  EXPECT_EQ(imported, 0u);
  for (void* p : {before, small, large}) free(p);
}

TEST_F(CApiIpc, AnImportOutlivesTheExportersFreeAndRelease) {
  sim_driver& sim = host_backed();
  void* p = allocate(24 * MiB);
  std::memset(p, 0x33, 24 * MiB);
  exported e;
  ASSERT_EQ(e.from(p), TIDEPOOL_SUCCESS) << last_error();
  void* view = nullptr;
  ASSERT_EQ(e.import(&view), TIDEPOOL_SUCCESS) << last_error();
  const std::size_t mapped_with_import = sim.mapped_bytes(0);
  free(p);
  size_t released = 0;
  ASSERT_EQ(tidepool_release_cached_memory(&released), TIDEPOOL_SUCCESS);
  EXPECT_GE(released, 24 * MiB) << "the pool hands its handles back as if nothing were imported";
  EXPECT_LT(sim.mapped_bytes(0), mapped_with_import);
  auto* seen = static_cast<unsigned char*>(view);
  EXPECT_EQ(seen[0], 0x33);
  EXPECT_EQ(seen[24 * MiB - 1], 0x33);
  EXPECT_EQ(tidepool_close_imported_memory(view), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_EQ(sim.mapped_bytes(0), 0u);
}

TEST_F(CApiIpc, BadExportsAreRefusedAndOpenNothing) {
  host_backed();
  void* p = allocate(6 * MiB);
  const std::size_t open_before = open_descriptors();
  int local = 0;
  exported foreign;
  EXPECT_EQ(foreign.from(&local), TIDEPOOL_INVALID_POINTER);
  EXPECT_NE(last_error().find("not allocated by tidepool"), std::string::npos) << last_error();
  exported interior;
  EXPECT_EQ(interior.from(static_cast<char*>(p) + 4096), TIDEPOOL_INVALID_POINTER) << last_error();
  // Too little room: nothing opened, and the count says what is needed.
  std::array<uint8_t, 16> uuid{};
  size_t count = 0;
  size_t offset = 0;
  size_t bytes = 0;
  EXPECT_EQ(tidepool_export_memory(p, uuid.data(), nullptr, nullptr, nullptr, 0, &count, &offset, &bytes),
            TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_GE(count, 1u);
  EXPECT_NE(last_error().find("room was given for 0"), std::string::npos) << last_error();
  EXPECT_EQ(tidepool_export_memory(p, nullptr, nullptr, nullptr, nullptr, 0, &count, &offset, &bytes),
            TIDEPOOL_INVALID_ARGUMENT);
  free(p);
  exported freed;
  EXPECT_EQ(freed.from(p), TIDEPOOL_DOUBLE_FREE) << last_error();
  // Nothing is left open but each handle's first export, which stays while the handle lives (the
  // next export costs no driver call: AHandleIsExportedByTheDriverOnceWhileItLives).
  EXPECT_EQ(open_descriptors(), open_before + count);
}

TEST_F(CApiIpc, AHandleIsExportedByTheDriverOnceWhileItLives) {
  sim_driver& sim = host_backed();
  free(allocate(4096));  // the pool exists (and holds what it holds open, the GPU's ledger)
  size_t released = 0;
  ASSERT_EQ(tidepool_release_cached_memory(&released), TIDEPOOL_SUCCESS);
  const std::size_t open_before = open_descriptors();
  void* p = allocate(6 * MiB);
  const auto exports = [&sim] { return sim.call_counts().of(driver_call::mem_export); };
  const std::uint64_t before = exports();
  std::vector<uint64_t> first_ids;
  for (int i = 0; i < 3; ++i) {
    exported e;
    ASSERT_EQ(e.from(p), TIDEPOOL_SUCCESS) << last_error();
    ASSERT_EQ(e.ids.size(), 1u);
    EXPECT_NE(e.ids[0], 0u);
    if (i == 0) first_ids = e.ids;
    EXPECT_EQ(e.ids, first_ids) << "one handle, one export id while it lives";
    void* view = nullptr;
    ASSERT_EQ(e.import(&view), TIDEPOOL_SUCCESS) << last_error();
    EXPECT_EQ(tidepool_close_imported_memory(view), TIDEPOOL_SUCCESS);
  }
  EXPECT_EQ(exports() - before, 1u) << "one handle under the allocation";
  free(p);
  ASSERT_EQ(tidepool_release_cached_memory(&released), TIDEPOOL_SUCCESS);
  EXPECT_EQ(open_descriptors(), open_before) << "the kept export closes with its handle";
  void* q = allocate(6 * MiB);  // a new handle: exported anew
  exported e;
  ASSERT_EQ(e.from(q), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_EQ(exports() - before, 2u);
  ASSERT_EQ(e.ids.size(), 1u);
  EXPECT_NE(e.ids[0], first_ids[0]) << "an export id is never another handle's";
  // Exported twice in one allocation's export, a handle names itself once: two allocations on
  // one handle give the same id.
  void* r = allocate(256 * 1024);
  exported small_first;
  exported small_second;
  void* s = allocate(256 * 1024);
  ASSERT_EQ(small_first.from(r), TIDEPOOL_SUCCESS) << last_error();
  ASSERT_EQ(small_second.from(s), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_EQ(small_first.ids, small_second.ids) << "two small blocks on one 2 MiB page";
  free(r);
  free(s);
  free(q);
}

TEST_F(CApiIpc, BadImportsAreRefusedAndMapNothing) {
  sim_driver& sim = host_backed();
  void* p = allocate(4 * MiB);
  exported e;
  ASSERT_EQ(e.from(p), TIDEPOOL_SUCCESS) << last_error();
  const std::size_t mapped = sim.mapped_bytes(0);
  const std::size_t open_before = open_descriptors();
  void* view = nullptr;
  // Another GPU's memory.
  exported other_gpu = e;
  other_gpu.count = 0;  // the copy closes nothing
  other_gpu.uuid[0] ^= 0xff;
  EXPECT_EQ(tidepool_import_memory(other_gpu.uuid.data(), e.fds.data(), e.sizes.data(), e.count, e.offset, e.bytes,
                                   &view, nullptr),
            TIDEPOOL_INVALID_DEVICE);
  EXPECT_NE(last_error().find("does not see that GPU"), std::string::npos) << last_error();
  // Bytes beyond the handles, no bytes, a size that is not the handle's.
  EXPECT_EQ(tidepool_import_memory(e.uuid.data(), e.fds.data(), e.sizes.data(), e.count, e.offset, 64 * MiB, &view, nullptr),
            TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_import_memory(e.uuid.data(), e.fds.data(), e.sizes.data(), e.count, e.offset, 0, &view, nullptr),
            TIDEPOOL_INVALID_ARGUMENT);
  std::vector<size_t> wrong_sizes(e.sizes);
  wrong_sizes[0] += 2 * MiB;
  EXPECT_NE(tidepool_import_memory(e.uuid.data(), e.fds.data(), wrong_sizes.data(), e.count, e.offset, e.bytes,
                                   &view, nullptr),
            TIDEPOOL_SUCCESS);
  // A descriptor that is not exported memory.
  std::array<int, 2> pipe_ends{};
  ASSERT_EQ(::pipe(pipe_ends.data()), 0);
  std::vector<int> not_memory(e.count, pipe_ends[0]);
  EXPECT_EQ(tidepool_import_memory(e.uuid.data(), not_memory.data(), e.sizes.data(), e.count, e.offset, e.bytes,
                                   &view, nullptr),
            TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("not memory another process exported"), std::string::npos) << last_error();
  ::close(pipe_ends[0]);
  ::close(pipe_ends[1]);
  EXPECT_EQ(tidepool_import_memory(e.uuid.data(), nullptr, e.sizes.data(), e.count, e.offset, e.bytes, &view, nullptr),
            TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_import_memory(e.uuid.data(), e.fds.data(), e.sizes.data(), 0, e.offset, e.bytes, &view, nullptr),
            TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(sim.mapped_bytes(0), mapped) << "a failed import leaves nothing mapped";
  EXPECT_EQ(open_descriptors(), open_before) << "nor any descriptor open";
  // Closing what was never imported, or twice.
  EXPECT_EQ(tidepool_close_imported_memory(p), TIDEPOOL_INVALID_POINTER);
  ASSERT_EQ(e.import(&view), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_EQ(tidepool_close_imported_memory(view), TIDEPOOL_SUCCESS);
  EXPECT_EQ(tidepool_close_imported_memory(view), TIDEPOOL_INVALID_POINTER);
  EXPECT_NE(last_error().find("closed already"), std::string::npos) << last_error();
  free(p);
}

TEST_F(CApiIpc, MemoryOfTheSecondGpuIsMappedOnItFoundByItsUuid) {
  sim_config config;
  config.device_count = 2;
  config.capacity = 256 * MiB;
  config.back_with_host_memory = true;
  config.uuid_key = "capi-ipc-two-gpus";
  sim_driver& sim = use_sim(std::move(config));
  void* p = nullptr;
  ASSERT_EQ(tidepool_allocate(3 * MiB, 1, nullptr, TIDEPOOL_SCRATCH, &p), TIDEPOOL_SUCCESS) << last_error();
  std::memset(p, 0x61, 3 * MiB);
  exported e;
  ASSERT_EQ(e.from(p), TIDEPOOL_SUCCESS) << last_error();
  void* view = nullptr;
  int device = -1;
  ASSERT_EQ(tidepool_import_memory(e.uuid.data(), e.fds.data(), e.sizes.data(), e.count, e.offset, e.bytes, &view,
                                   &device),
            TIDEPOOL_SUCCESS)
      << last_error();
  EXPECT_EQ(device, 1);
  EXPECT_TRUE(sim.has_access(1, reinterpret_cast<device_address>(view), 1));
  EXPECT_EQ(static_cast<unsigned char*>(view)[3 * MiB - 1], 0x61);
  EXPECT_EQ(tidepool_close_imported_memory(view), TIDEPOOL_SUCCESS);
  EXPECT_EQ(tidepool_deallocate(p, 1, nullptr), TIDEPOOL_SUCCESS);
}

TEST_F(CApiIpc, ASleepingTagsMemoryIsNotExported) {
  host_backed();
  ASSERT_EQ(tidepool_push_tag("weights"), TIDEPOOL_SUCCESS);
  void* p = allocate(4 * MiB);
  ASSERT_EQ(tidepool_pop_tag(), TIDEPOOL_SUCCESS);
  size_t slept = 0;
  ASSERT_EQ(tidepool_sleep("weights", TIDEPOOL_KEEP_NOTHING, &slept), TIDEPOOL_SUCCESS) << last_error();
  exported e;
  EXPECT_EQ(e.from(p), TIDEPOOL_ASLEEP) << last_error();
  ASSERT_EQ(tidepool_wake("weights"), TIDEPOOL_SUCCESS) << last_error();
  exported awake;
  EXPECT_EQ(awake.from(p), TIDEPOOL_SUCCESS) << last_error();
  free(p);
}

// A tag's memory exported and not yet ended stays awake through tidepool_sleep; once
// tidepool_end_export says the other process let go, it sleeps. An export refused for want of room
// counts for nothing.
TEST_F(CApiIpc, ASharedTagsMemoryStaysAwakeUntilTheExportEnds) {
  host_backed();
  ASSERT_EQ(tidepool_push_tag("weights"), TIDEPOOL_SUCCESS);
  void* p = allocate(96 * MiB);  // two handles
  ASSERT_EQ(tidepool_pop_tag(), TIDEPOOL_SUCCESS);
  std::array<uint8_t, 16> uuid{};
  size_t count = 0, offset = 0, bytes = 0;
  ASSERT_EQ(tidepool_export_memory(p, uuid.data(), nullptr, nullptr, nullptr, 0, &count, &offset, &bytes),
            TIDEPOOL_INVALID_ARGUMENT);
  ASSERT_GT(count, 1u) << "no room: nothing exported, nothing in use";
  {
    exported e;
    ASSERT_EQ(e.from(p), TIDEPOOL_SUCCESS) << last_error();
  }
  size_t slept = 0;
  ASSERT_EQ(tidepool_sleep("weights", TIDEPOOL_KEEP_CONTENTS, &slept), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_EQ(slept, 0u) << "the shared allocation stays awake";
  ASSERT_EQ(tidepool_wake("weights"), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_EQ(tidepool_end_export(p), TIDEPOOL_SUCCESS) << last_error();
  ASSERT_EQ(tidepool_sleep("weights", TIDEPOOL_KEEP_CONTENTS, &slept), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_GE(slept, 96 * MiB) << "the export ended: it sleeps";
  ASSERT_EQ(tidepool_wake("weights"), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_EQ(tidepool_end_export(nullptr), TIDEPOOL_INVALID_POINTER);
  free(p);
  EXPECT_EQ(tidepool_end_export(p), TIDEPOOL_DOUBLE_FREE) << "freed: its end comes too late to matter";
}

TEST_F(CApiIpc, CudaIpcHandlesAreRefusedClearlyWhereTheDriverHasNone) {
  sim_driver& sim = host_backed();
  std::array<uint8_t, 64> handle{};
  handle.fill(0x5a);
  void* p = nullptr;
  EXPECT_EQ(tidepool_open_cuda_ipc_memory(0, handle.data(), &p), TIDEPOOL_UNAVAILABLE) << last_error();
  EXPECT_NE(last_error().find("no cudaIpc memory handles"), std::string::npos) << last_error();
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(sim.call_counts().of(driver_call::ipc_open), 0u) << "sim refuses before counting a call";
  EXPECT_EQ(tidepool_open_cuda_ipc_memory(7, handle.data(), &p), TIDEPOOL_INVALID_DEVICE) << last_error();
  EXPECT_EQ(tidepool_open_cuda_ipc_memory(-1, handle.data(), &p), TIDEPOOL_INVALID_DEVICE) << last_error();
  EXPECT_EQ(tidepool_open_cuda_ipc_memory(0, nullptr, &p), TIDEPOOL_INVALID_ARGUMENT) << last_error();
  EXPECT_EQ(tidepool_open_cuda_ipc_memory(0, handle.data(), nullptr), TIDEPOOL_INVALID_ARGUMENT) << last_error();
  void* q = allocate(4096);
  EXPECT_EQ(tidepool_close_cuda_ipc_memory(q), TIDEPOOL_INVALID_POINTER) << last_error();
  EXPECT_NE(last_error().find("not memory opened from a CUDA IPC handle"), std::string::npos) << last_error();
  EXPECT_EQ(tidepool_close_cuda_ipc_memory(nullptr), TIDEPOOL_INVALID_POINTER) << last_error();
  free(q);
  // The UUID a receiver finds the GPU of such a handle by.
  std::array<uint8_t, 16> uuid{};
  EXPECT_EQ(tidepool_device_uuid(0, uuid.data()), TIDEPOOL_SUCCESS) << last_error();
  EXPECT_NE(uuid, (std::array<uint8_t, 16>{}));
  EXPECT_EQ(tidepool_device_uuid(7, uuid.data()), TIDEPOOL_INVALID_DEVICE) << last_error();
  EXPECT_EQ(tidepool_device_uuid(0, nullptr), TIDEPOOL_INVALID_ARGUMENT) << last_error();
}

}  // namespace
}  // namespace tidepool::testing

// ipc_gpu_test.cpp: memory shared between processes on a real GPU (pool::export_allocation,
// tidepool::import_memory): an allocation exported and imported in this process shows the same
// bytes both ways and outlives the exporter's free and release; another process (this binary run
// again, given the descriptors across exec) reads what this one wrote and writes what this one
// then reads. Skips itself where the CUDA driver or a device is missing.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "tidepool/pool.hpp"
#include "tidepool/process.hpp"

namespace tidepool {
namespace {

using gpu_test::check;
using gpu_test::cu;
using gpu_test::first_mismatch;

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr const char* child_variable = "TIDEPOOL_IPC_TEST_CHILD";

CUdeviceptr to_cu(const void* ptr) { return reinterpret_cast<CUdeviceptr>(ptr); }
std::uintptr_t to_address(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr); }

device_uuid_bytes uuid_of(int device) {
  device_uuid_bytes uuid{};
  EXPECT_EQ(default_driver()->device_uuid(device, &uuid), driver_status::success);
  return uuid;
}

void close_all(const exported_allocation& e) {
  for (const int fd : e.fds) ::close(fd);
}

// Makes device 0's primary context (opened by the pool) current, for the test's own copies.
void make_current() { gpu_test::make_current(*default_driver()); }

// Sets every one of `bytes` bytes at `ptr` to `value` and waits for it.
void fill(const void* ptr, std::size_t bytes, unsigned char value) {
  check(cu().cuMemsetD8(to_cu(ptr), value, bytes), "cuMemsetD8");
  check(cu().cuCtxSynchronize(), "sync");
}

TEST(IpcOnGpu, AnImportSeesTheSameBytesAndOutlivesTheExporter) {
  TIDEPOOL_REQUIRE_GPU();
  if (std::getenv(child_variable) != nullptr) GTEST_SKIP() << "the child's run";
  pool& p = device_pool(0);
  make_current();
  const std::size_t bytes = 40 * MiB + 5000;
  void* neighbour = p.allocate(3000);
  void* a = p.allocate(bytes);
  fill(a, bytes, 0x5a);
  const exported_allocation e = p.export_allocation(a);
  ASSERT_GE(e.fds.size(), 1u);
  EXPECT_EQ(e.bytes, bytes);
  void* view = import_memory(uuid_of(0), e.fds, e.handle_sizes, e.offset, e.bytes);
  close_all(e);
  EXPECT_NE(view, a);
  EXPECT_EQ(first_mismatch(to_address(view), bytes, 0x5a), -1);
  fill(view, bytes, 0x17);
  EXPECT_EQ(first_mismatch(to_address(a), bytes, 0x17), -1);
  // The exporter lets go: the import keeps the memory and its bytes.
  p.deallocate(a);
  p.deallocate(neighbour);
  EXPECT_GE(release_cached_memory(), bytes);
  EXPECT_EQ(first_mismatch(to_address(view), bytes, 0x17), -1);
  EXPECT_GE(imported_bytes(), bytes);
  close_imported_memory(view);
  EXPECT_EQ(imported_bytes(), 0u);
}

TEST(IpcOnGpu, AnotherProcessReadsAndWritesTheAllocation) {
  TIDEPOOL_REQUIRE_GPU();
  if (std::getenv(child_variable) != nullptr) GTEST_SKIP() << "the child's run";
  pool& p = device_pool(0);
  make_current();
  const std::size_t bytes = 30 * MiB + 123;
  void* a = p.allocate(bytes);
  fill(a, bytes, 0x21);
  const exported_allocation e = p.export_allocation(a);
  // The child gets the descriptors across exec, and the figures in its environment.
  std::ostringstream spec;
  const device_uuid_bytes uuid = uuid_of(0);
  for (const auto byte : uuid) spec << static_cast<int>(byte) << ' ';
  spec << e.offset << ' ' << e.bytes << ' ' << e.fds.size();
  for (std::size_t i = 0; i < e.fds.size(); ++i) {
    spec << ' ' << e.fds[i] << ' ' << e.handle_sizes[i];
    ASSERT_EQ(::fcntl(e.fds[i], F_SETFD, 0), 0);  // kept across exec
  }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::setenv(child_variable, spec.str().c_str(), 1);
    ::execl("/proc/self/exe", "ipc_gpu_test_child", "--gtest_filter=IpcOnGpu.ChildSide", nullptr);
    ::_exit(127);
  }
  close_all(e);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's checks failed (its output is above)";
  EXPECT_EQ(first_mismatch(to_address(a), bytes, 0x42), -1) << "what the child wrote";
  p.deallocate(a);
}

// Run only as the child of the test above: imports the allocation, checks the parent's bytes and
// writes its own.
TEST(IpcOnGpu, ChildSide) {
  const char* spec_text = std::getenv(child_variable);
  if (spec_text == nullptr) GTEST_SKIP() << "run by AnotherProcessReadsAndWritesTheAllocation";
  std::istringstream spec(spec_text);
  device_uuid_bytes uuid{};
  for (auto& byte : uuid) {
    int value = 0;
    spec >> value;
    byte = static_cast<std::uint8_t>(value);
  }
  std::size_t offset = 0;
  std::size_t bytes = 0;
  std::size_t count = 0;
  spec >> offset >> bytes >> count;
  std::vector<int> fds(count);
  std::vector<std::size_t> sizes(count);
  for (std::size_t i = 0; i < count; ++i) spec >> fds[i] >> sizes[i];
  void* view = import_memory(uuid, fds, sizes, offset, bytes);
  for (const int fd : fds) ::close(fd);
  make_current();
  EXPECT_EQ(first_mismatch(to_address(view), bytes, 0x21), -1) << "the parent's bytes";
  fill(view, bytes, 0x42);
  close_imported_memory(view);
}

}  // namespace
}  // namespace tidepool

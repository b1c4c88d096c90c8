// Recording (process.hpp start_recording, TIDEPOOL_RECORD) on sim: every allocation and free of
// every device's pool, in the log format the replay reads; allocations live at the start; failed
// allocations; bounded buffers; a file cut short by a kill; the recent events and describe().
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "process/process_fixture.hpp"
#include "process/record_file.hpp"
#include "replay/trace_reader.hpp"
#include "replay/temp_file.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/pool.hpp"
#include "tidepool/process.hpp"

namespace tidepool::testing {
namespace {

using replay::testing::temp_file;
using replay::trace_action;

class recording : public process_test {
 protected:
  void TearDown() override {
    stop_recording();
    process_test::TearDown();
  }
};

TEST_F(recording, EveryAllocationAndFreeOfEveryDeviceInTheReplayFormat) {
  for (const char* suffix : {".csv", ".csv.gz"}) {
    SCOPED_TRACE(suffix);
    detail::reset_process_for_testing();
    use_small_sim(2);
    temp_file file(suffix);
    start_recording(file.path().string());
    EXPECT_EQ(recording_path(), file.path().string());
    // Two threads on two devices, each allocating and freeing in turn.
    std::vector<std::thread> threads;
    for (int d = 0; d < 2; ++d) {
      threads.emplace_back([d] {
        std::vector<void*> live;
        for (int i = 0; i < 500; ++i) {
          live.push_back(device_pool(d).allocate(std::size_t(1 + i % 7) * 4096));
          if (i % 3 == 2) {
            device_pool(d).deallocate(live.front());
            live.erase(live.begin());
          }
        }
        for (void* p : live) device_pool(d).deallocate(p);
      });
    }
    for (auto& t : threads) t.join();
    stop_recording();
    EXPECT_EQ(recording_path(), "");

    const replay::trace t = replay::read_trace(file.path());  // checks every row and free
    EXPECT_FALSE(t.truncated);
    ASSERT_EQ(t.events.size(), 2u * 500 * 2);
    std::set<std::uint32_t> thread_ids;
    std::size_t allocations = 0;
    std::int64_t last_time = 0;
    for (const auto& e : t.events) {
      thread_ids.insert(e.thread);
      if (e.action == trace_action::allocate) {
        ++allocations;
        EXPECT_GE(e.size, 4096u);
      }
      EXPECT_GE(e.time_us, 0);
      last_time = std::max(last_time, e.time_us);
    }
    EXPECT_EQ(allocations, 1000u);
    EXPECT_EQ(thread_ids.size(), 2u);  // the two threads, by id
    EXPECT_LT(last_time, 60'000'000);   // time since the recording began
  }
}

TEST_F(recording, BeginsWithTheAllocationsLiveAtTheStart) {
  use_small_sim();
  void* before = device_pool(0).allocate(3 * MiB);
  temp_file file(".csv");
  start_recording(file.path().string());
  device_pool(0).deallocate(before);  // freed while recording: its allocation must be in the file
  void* during = device_pool(0).allocate(5000);
  stop_recording();
  void* after = device_pool(0).allocate(7000);  // not recorded
  const replay::trace t = replay::read_trace(file.path());
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(t.events[0].action, trace_action::allocate);
  EXPECT_EQ(t.events[0].thread, 0u);
  EXPECT_EQ(t.events[0].pointer, reinterpret_cast<std::uintptr_t>(before));
  EXPECT_EQ(t.events[0].size, 3 * MiB);
  EXPECT_EQ(t.events[1].action, trace_action::free);
  EXPECT_EQ(t.events[2].pointer, reinterpret_cast<std::uintptr_t>(during));
  EXPECT_EQ(t.events[2].size, 5000u);
  device_pool(0).deallocate(during);
  device_pool(0).deallocate(after);
}

TEST_F(recording, AFailedAllocationIsAnAllocateFailureRow) {
  use_small_sim();  // 1 GiB
  temp_file file(".csv");
  start_recording(file.path().string());
  void* big = device_pool(0).allocate(700 * MiB);
  EXPECT_THROW((void)device_pool(0).allocate(600 * MiB), out_of_memory);
  device_pool(0).deallocate(big);
  stop_recording();
  const replay::trace t = replay::read_trace(file.path());
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(t.events[1].action, trace_action::allocate_failure);
  EXPECT_EQ(t.events[1].size, 600 * MiB);
}

TEST_F(recording, APoolMadeDuringTheRecordingIsRecorded) {
  use_small_sim(2);
  temp_file file(".csv");
  (void)device_pool(0);
  start_recording(file.path().string());
  void* p = device_pool(1).allocate(MiB);  // device 1's pool is made now
  device_pool(1).deallocate(p);
  stop_recording();
  EXPECT_EQ(replay::read_trace(file.path()).events.size(), 2u);
}

TEST_F(recording, RefusesASecondRecordingAndAFileItCannotCreate) {
  use_small_sim();
  temp_file file(".csv");
  start_recording(file.path().string());
  EXPECT_THROW(start_recording(file.path().string() + ".other"), error);
  stop_recording();
  EXPECT_THROW(start_recording("/nonexistent-dir/x.csv"), error);
  EXPECT_EQ(recording_path(), "");
  stop_recording();  // nothing to stop: fine
}

TEST_F(recording, ABufferNeverGrowsPastItsBoundWhenTheWriterSleeps) {
  use_small_sim();
  temp_file file(".csv");
  recording_options options;
  options.flush_interval = std::chrono::hours(1);  // the writer thread never wakes: by time...
  options.notify_events = 4000;                     // ...nor by size, since the bound comes first
  options.synchronous_events = 4000;
  start_recording(file.path().string(), options);
  for (int i = 0; i < 50'000; ++i) device_pool(0).deallocate(device_pool(0).allocate(4096));
  // The allocating thread wrote whatever reached the bound before its call returned, so at most
  // the bound's worth of rows is still unwritten.
  std::ifstream in(file.path());
  std::size_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_GE(lines, 1 + 100'000 - 4000u);
  stop_recording();
  EXPECT_EQ(replay::read_trace(file.path()).events.size(), 100'000u);
}

// A child records, flushes, keeps allocating and is killed: the file reads up to the last flush.
TEST_F(recording, AKilledProcessLeavesAReadableFile) {
  for (const char* suffix : {".csv", ".csv.gz"}) {
    SCOPED_TRACE(suffix);
    temp_file file(suffix);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      detail::reset_process_for_testing();
      auto sim = std::make_shared<sim_driver>(sim_config{});
      set_default_driver(sim);
      recording_options options;
      options.flush_interval = std::chrono::milliseconds(5);
      start_recording(file.path().string(), options);
      for (;;) {
        std::vector<void*> live;
        for (int i = 0; i < 64; ++i) live.push_back(device_pool(0).allocate(std::size_t(1 + i) * 1000));
        for (void* p : live) device_pool(0).deallocate(p);
      }
    }
    // Wait until several flushes reached the file, then kill the child mid-run.
    for (int i = 0; i < 400 && (!std::filesystem::exists(file.path()) || std::filesystem::file_size(file.path()) < 200'000); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    const replay::trace t = replay::read_trace(file.path());
    EXPECT_GT(t.events.size(), 1000u);
  }
}

// A forked child (a data-loader worker) exits normally: its copy of the buffers must not reach the
// parent's file (they would repeat rows), and the parent goes on recording.
TEST_F(recording, AForkedChildWritesNothingToTheParentsFile) {
  use_small_sim();
  temp_file file(".csv");
  recording_options options;
  options.flush_interval = std::chrono::hours(1);  // everything still buffered when the child forks
  start_recording(file.path().string(), options);
  for (int i = 0; i < 10; ++i) device_pool(0).deallocate(device_pool(0).allocate(4096));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (int i = 0; i < 10; ++i) device_pool(0).deallocate(device_pool(0).allocate(8192));
    std::exit(0);  // atexit stops the recording: in the child it writes nothing
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (int i = 0; i < 5; ++i) device_pool(0).deallocate(device_pool(0).allocate(4096));
  stop_recording();
  const replay::trace t = replay::read_trace(file.path());
  EXPECT_EQ(t.events.size(), 30u);
  for (const auto& e : t.events) EXPECT_EQ(e.size, 4096u);
}

TEST(record_reader, ACutGzipStreamOrLastLineReadsUpToTheLastWholeRow) {
  std::string rows = "Thread,Time,Action,Pointer,Size,Stream\n";
  for (int i = 0; i < 100; ++i) {
    rows += fmt::format("1,00:00:00.{:06},allocate,{:#x},{},0x0\n", i, 0x1000 * (i + 1), 512 + i);
  }
  for (const char* suffix : {".csv", ".csv.gz"}) {
    SCOPED_TRACE(suffix);
    temp_file file(suffix);
    {
      detail::record_file f(file.path().string());
      f.write(rows.substr(0, 2000));
      f.write(rows.substr(2000));  // two flushes: two gzip members
    }
    const auto whole = std::filesystem::file_size(file.path());
    EXPECT_EQ(replay::read_trace(file.path()).events.size(), 100u);
    // Cut at many lengths from the end back into the second flush: the rows before the cut are
    // read, and never a wrong one (a gzip member without its trailer is always "truncated").
    for (std::size_t cut = 1; cut < 400; cut += 7) {
      std::filesystem::resize_file(file.path(), whole - cut);
      const replay::trace t = replay::read_trace(file.path());
      if (std::string(suffix) == ".csv.gz") {
        EXPECT_TRUE(t.truncated) << cut;
      }
      EXPECT_GE(t.events.size(), 90u) << cut;
      EXPECT_LE(t.events.size(), cut < 10 ? 100u : 99u) << cut;
      for (std::size_t i = 0; i < t.events.size(); ++i) EXPECT_EQ(t.events[i].size, 512 + i) << cut;
    }
  }
}

TEST(record_reader, AStoredGzipMemberHasTheRightChecksum) {
  // CRC-32 of "123456789" is 0xCBF43926 (the standard check value), and zlib's on every length.
  EXPECT_EQ(detail::crc32_update(0, "123456789", 9), 0xCBF43926u);
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>((i * 131 + 7) & 0xFF));
  for (std::size_t n = 0; n <= data.size(); n += 13) {
    const auto* bytes = reinterpret_cast<const Bytef*>(data.data());
    const auto expected = static_cast<std::uint32_t>(::crc32(::crc32(0, nullptr, 0), bytes, static_cast<uInt>(n)));
    EXPECT_EQ(detail::crc32_update(0, data.data(), n), expected) << n;
    EXPECT_EQ(detail::crc32_update(detail::crc32_update(0, data.data(), n / 3), data.data() + n / 3, n - n / 3), expected);
  }
}

TEST_F(recording, RecentEventsKeepMapsAndTheLatestEventsOnly) {
  use_small_sim();
  temp_file file(".csv");
  recording_options options;
  options.history_events = 50;
  start_recording(file.path().string(), options);
  void* p = device_pool(0).allocate(64 * MiB);
  std::vector<recorded_event> events = recent_events(0);
  ASSERT_FALSE(events.empty());
  bool mapped = false;
  for (const auto& e : events) mapped |= e.what == recorded_event::kind::map;
  EXPECT_TRUE(mapped);
  EXPECT_EQ(events.back().what, recorded_event::kind::allocate);
  EXPECT_EQ(events.back().address, reinterpret_cast<std::uintptr_t>(p));
  for (int i = 0; i < 100; ++i) device_pool(0).deallocate(device_pool(0).allocate(4096));
  events = recent_events(0);
  EXPECT_EQ(events.size(), 50u);
  EXPECT_EQ(events.back().what, recorded_event::kind::free);
  device_pool(0).deallocate(p);
  EXPECT_GE(device_pool(0).release(), 64 * MiB);
  events = recent_events(0);
  EXPECT_EQ(events.back().what, recorded_event::kind::unmap);
}

TEST_F(recording, TheEnvironmentStartsOneWithTheFirstPool) {
  use_small_sim();
  temp_file file(".csv.gz");
  ASSERT_EQ(::setenv("TIDEPOOL_RECORD", file.path().c_str(), 1), 0);
  void* p = device_pool(0).allocate(MiB);
  ::unsetenv("TIDEPOOL_RECORD");
  EXPECT_EQ(recording_path(), file.path().string());
  device_pool(0).deallocate(p);
  stop_recording();
  EXPECT_EQ(replay::read_trace(file.path()).events.size(), 2u);
}

}  // namespace
}  // namespace tidepool::testing

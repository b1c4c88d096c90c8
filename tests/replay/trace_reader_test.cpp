// Reading RMM replay logs: valid plain, gzip and xz files, and each kind of malformed input, whose
// error names the file and the line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "replay/trace_reader.hpp"
#include "replay/xz_input.hpp"
#include "temp_file.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::replay::testing {
namespace {

const std::string header = "Thread,Time,Action,Pointer,Size,Stream\n";

// Reads `text` as a trace file and returns the error message (empty when it reads).
std::string read_error(const std::string& text, const std::string& suffix = ".csv") {
  temp_file file(suffix);
  file.write(text);
  try {
    (void)read_trace(file.path());
  } catch (const error& e) {
    EXPECT_EQ(e.code(), error_code::invalid_argument);
    const std::string message = e.what();
    EXPECT_NE(message.find(file.path().string()), std::string::npos) << message;
    return message;
  }
  return {};
}

TEST(TraceReader, ReadsPlainGzipAndXzLogs) {
  const std::string text = header +
                           "0,08:50:46.808154,allocate,0x7efeb4000000,154389504,0x0\n"
                           "3,08:50:46.900000,allocate,0x10,512,0x7f00aa\n"
                           "1,08:50:47.000001,free,0x7efeb4000000,154389504,0x0\n"
                           "0,08:50:47.5,allocate failure,0x0,1099511627776,0x0\n";
  std::vector<std::string> suffixes = {".csv", ".csv.gz"};
  if (detail::xz_input::available()) suffixes.emplace_back(".csv.xz");
  for (const std::string& suffix : suffixes) {
    temp_file file(suffix);
    file.write(text);
    const trace t = read_trace(file.path());
    EXPECT_EQ(t.name, file.path().filename().string());
    ASSERT_EQ(t.events.size(), 4u);
    EXPECT_EQ(t.events[0].action, trace_action::allocate);
    EXPECT_EQ(t.events[0].pointer, 0x7efeb4000000u);
    EXPECT_EQ(t.events[0].size, 154389504u);
    EXPECT_EQ(t.events[0].time_us, ((8 * 60 + 50) * 60 + 46) * 1'000'000LL + 808154);
    EXPECT_EQ(t.events[1].thread, 3u);
    EXPECT_EQ(t.events[1].stream, 0x7f00aau);
    EXPECT_EQ(t.events[2].action, trace_action::free);
    EXPECT_EQ(t.events[3].action, trace_action::allocate_failure);
    EXPECT_EQ(t.events[3].time_us % 1'000'000, 500000);
  }
}

TEST(TraceReader, AcceptsWindowsLineEndsAndBlankLines) {
  EXPECT_EQ(read_error("Thread,Time,Action,Pointer,Size,Stream\r\n\r\n0,0.0,allocate,0x1,8,0x0\r\n"), "");
}

TEST(TraceReader, RejectsABadHeader) {
  const std::string message = read_error("Thread,Time,Action,Pointer,Size\n0,0.0,allocate,0x1,8,0x0\n");
  EXPECT_NE(message.find(":1: bad header"), std::string::npos) << message;
  EXPECT_NE(read_error("").find(":1: empty file"), std::string::npos);
}

TEST(TraceReader, RejectsAWrongNumberOfFields) {
  EXPECT_NE(read_error(header + "0,0.0,allocate,0x1,8,0x0\n0,0.0,allocate,0x2,8\n").find(":3: expected 6 fields, found 5"),
            std::string::npos);
  EXPECT_NE(read_error(header + "0,0.0,allocate,0x2,8,0x0,extra\n").find(":2: expected 6 fields, found more than 6"),
            std::string::npos);
}

TEST(TraceReader, RejectsBadNumbers) {
  EXPECT_NE(read_error(header + "x,0.0,allocate,0x1,8,0x0\n").find(":2: bad thread \"x\""), std::string::npos);
  EXPECT_NE(read_error(header + "0,08:61:00.0,allocate,0x1,8,0x0\n").find(":2: bad time"), std::string::npos);
  EXPECT_NE(read_error(header + "0,0.0,allocate,0xZZ,8,0x0\n").find(":2: bad pointer \"0xZZ\""), std::string::npos);
  EXPECT_NE(read_error(header + "0,0.0,allocate,0x1,-8,0x0\n").find(":2: bad size \"-8\""), std::string::npos);
  EXPECT_NE(read_error(header + "0,0.0,allocate,0x1,8,stream\n").find(":2: bad stream"), std::string::npos);
  EXPECT_NE(read_error(header + "0,0.0,allocate,0x1,99999999999999999999999,0x0\n").find(":2: bad size"),
            std::string::npos);
}

// Times whose microseconds would not fit an int64 (found by fuzz_trace_reader: a signed overflow).
TEST(TraceReader, RejectsTimesTooLargeToCount) {
  EXPECT_NE(read_error(header + "0,17454545319110:00:00.0,allocate,0x1,8,0x0\n").find(":2: bad time"),
            std::string::npos);
  EXPECT_NE(read_error(header + "0,17454545319110.5,allocate,0x1,8,0x0\n").find(":2: bad time"), std::string::npos);
  EXPECT_NE(read_error(header + "0,9223372036854775807,allocate,0x1,8,0x0\n").find(":2: bad time"),
            std::string::npos);
}

// Negative hours, minutes or seconds (found by fuzz_trace_reader: read as a negative time, which
// the writer then wrote as "-9:-8:-9.-690309" and the reader refused on reading it back).
TEST(TraceReader, RejectsNegativeTimes) {
  EXPECT_NE(read_error(header + "0,-10:51:50.309691,allocate,0x1,8,0x0\n").find(":2: bad time"), std::string::npos);
  EXPECT_NE(read_error(header + "0,10:-5:50.0,allocate,0x1,8,0x0\n").find(":2: bad time"), std::string::npos);
  EXPECT_NE(read_error(header + "0,-3.5,allocate,0x1,8,0x0\n").find(":2: bad time"), std::string::npos);
  EXPECT_NE(read_error(header + "-1,0.0,allocate,0x1,8,0x0\n").find(":2: bad thread"), std::string::npos);
}

TEST(TraceReader, RejectsAnUnknownAction) {
  EXPECT_NE(read_error(header + "0,0.0,allocate,0x1,8,0x0\n0,0.0,realloc,0x1,8,0x0\n").find(":3: unknown action \"realloc\""),
            std::string::npos);
}

TEST(TraceReader, RejectsAFreeOfAPointerThatIsNotLive) {
  EXPECT_NE(read_error(header + "0,0.0,free,0xabc,8,0x0\n").find(":2: free of pointer 0xabc, which is not live"),
            std::string::npos);
  EXPECT_NE(read_error(header + "0,0.0,allocate,0xabc,8,0x0\n0,0.0,free,0xabc,8,0x0\n0,0.0,free,0xabc,8,0x0\n")
                .find(":4: free of pointer 0xabc"),
            std::string::npos);
}

TEST(TraceReader, RejectsAllocatingALivePointerAgain) {
  EXPECT_NE(read_error(header + "0,0.0,allocate,0xabc,8,0x0\n0,0.0,allocate,0xabc,16,0x0\n")
                .find(":3: allocation of pointer 0xabc, which is already live"),
            std::string::npos);
  // Allowed once it was freed.
  EXPECT_EQ(read_error(header + "0,0.0,allocate,0xabc,8,0x0\n0,0.0,free,0xabc,8,0x0\n0,0.0,allocate,0xabc,8,0x0\n"), "");
}

// Two hundred rows, each with its own size (1001, 1002, ...): what a cut file kept is checkable.
std::string numbered_rows() {
  std::string rows = header;
  for (int i = 1; i <= 200; ++i) rows += fmt::format("0,0.{},allocate,{:#x},{},0x0\n", i, i * 4096, 1000 + i);
  return rows;
}

// Cuts a compressed file in its middle, as a killed recording leaves it, and reads it: its rows up
// to the last whole one, marked truncated.
void expect_a_cut_file_read_up_to_its_last_whole_row(const temp_file& file) {
  std::filesystem::resize_file(file.path(), std::filesystem::file_size(file.path()) / 2);
  const trace t = read_trace(file.path());
  EXPECT_TRUE(t.truncated);
  EXPECT_LT(t.events.size(), 200u);
  for (std::size_t i = 0; i < t.events.size(); ++i) EXPECT_EQ(t.events[i].size, 1001 + i);
}

// Overwrites the middle of a compressed file: not a cut, damage.
void damage_the_middle(const temp_file& file) {
  std::fstream f(file.path(), std::ios::in | std::ios::out | std::ios::binary);
  const auto size = static_cast<std::streamoff>(std::filesystem::file_size(file.path()));
  f.seekp(size / 2);
  const std::string junk(32, '\xff');
  f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
}

// A gzip stream cut short is a recording whose process was killed (tidepool's recorder streams
// its file): it reads up to its last whole row and says it was cut.
TEST(TraceReader, ReadsAGzipStreamCutShortUpToItsLastWholeRow) {
  temp_file file(".csv.gz");
  file.write(numbered_rows());
  EXPECT_FALSE(read_trace(file.path()).truncated);
  expect_a_cut_file_read_up_to_its_last_whole_row(file);
}

TEST(TraceReader, RejectsACorruptGzipFile) {
  temp_file file(".csv.gz");
  file.write(numbered_rows());
  damage_the_middle(file);
  EXPECT_THROW((void)read_trace(file.path()), error);
}

// xz is read by content, whatever the name, as gzip is; a stream cut short reads up to its last
// whole row, as a cut gzip stream does; damage is an error that names the file and the line.
TEST(TraceReader, ReadsXzByContentAndACutXzStreamUpToItsLastWholeRow) {
  if (!detail::xz_input::available()) GTEST_SKIP() << "this build has no liblzma";
  temp_file file(".csv.xz");
  file.write(numbered_rows());
  const std::filesystem::path renamed = file.path().string() + ".csv";
  std::filesystem::copy_file(file.path(), renamed);
  const trace whole = read_trace(renamed);
  std::filesystem::remove(renamed);
  EXPECT_FALSE(whole.truncated);
  ASSERT_EQ(whole.events.size(), 200u);
  EXPECT_EQ(whole.events[199].size, 1200u);
  expect_a_cut_file_read_up_to_its_last_whole_row(file);
}

TEST(TraceReader, RejectsACorruptXzFile) {
  if (!detail::xz_input::available()) GTEST_SKIP() << "this build has no liblzma";
  temp_file file(".csv.xz");
  file.write(numbered_rows());
  damage_the_middle(file);
  try {
    (void)read_trace(file.path());
    ADD_FAILURE() << "a corrupt xz file was read";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), error_code::invalid_argument);
    const std::string message = e.what();
    EXPECT_NE(message.find(file.path().string() + ":"), std::string::npos) << message;
    EXPECT_NE(message.find("cannot decompress (corrupt xz data)"), std::string::npos) << message;
  }
}

// An xz file in a build without liblzma is refused with what to do about it; with liblzma, an xz
// header followed by nothing else is a cut stream with no row.
TEST(TraceReader, AnXzFileSaysWhatTheBuildLacksOrIsReadAsCut) {
  temp_file file(".csv.xz");
  {
    std::ofstream out(file.path(), std::ios::binary);
    out.write("\xFD" "7zXZ\0", 6);
  }
  try {
    (void)read_trace(file.path());
    ADD_FAILURE() << "six bytes of xz magic read as a trace";
  } catch (const error& e) {
    const std::string message = e.what();
    if (detail::xz_input::available()) {
      EXPECT_EQ(e.code(), error_code::invalid_argument);
      EXPECT_NE(message.find("empty file"), std::string::npos) << message;
    } else {
      EXPECT_EQ(e.code(), error_code::unavailable);
      EXPECT_NE(message.find("liblzma-dev"), std::string::npos) << message;
    }
    EXPECT_NE(message.find(file.path().string()), std::string::npos) << message;
  }
}

TEST(TraceReader, DropsAPlainLastLineCutShortButKeepsAWholeOneWithoutNewline) {
  temp_file cut(".csv");
  cut.write(header + "0,0.1,allocate,0x1000,8,0x0\n0,0.2,allocate,0x2000,8,0");  // the stream's "x..." cut
  EXPECT_EQ(read_trace(cut.path()).events.size(), 2u);  // "0" is a whole stream: kept
  cut.write(header + "0,0.1,allocate,0x1000,8,0x0\n0,0.2,alloc");
  const trace t = read_trace(cut.path());
  EXPECT_EQ(t.events.size(), 1u);
  EXPECT_TRUE(t.truncated);
  cut.write(header + "0,0.1,allocate,0x1000,8,0x0\n0,0.2,allocate,0x2000,8,0x0");
  EXPECT_FALSE(read_trace(cut.path()).truncated);
  EXPECT_EQ(read_trace(cut.path()).events.size(), 2u);
}

// The message of the error read_trace(path) throws, or "" if it reads.
std::string path_error(const std::filesystem::path& path) {
  try {
    (void)read_trace(path);
  } catch (const error& e) {
    return e.what();
  }
  return {};
}

TEST(TraceReader, SaysWhyAFileCannotBeOpenedOrRead) {
  EXPECT_EQ(path_error("/nonexistent/trace.csv"), "/nonexistent/trace.csv: cannot open the trace: No such file or directory");
  const std::filesystem::path folder = std::filesystem::temp_directory_path();
  EXPECT_EQ(path_error(folder), folder.string() + ": cannot open the trace: Is a directory");
}

TEST(TraceReader, RefusesAnAllocationLargerThanTheDeviceNamingItsLine) {
  temp_file file(".csv");
  file.write(header + "0,0.0,allocate,0x1,1024,0x0\n\n0,0.0,allocate,0x2,4096,0x0\n");
  EXPECT_EQ(read_trace(file.path(), 4096).events.size(), 2u);  // exactly the device fits
  try {
    (void)read_trace(file.path(), 4095);
    FAIL() << "a 4096-byte allocation was read for a 4095-byte device";
  } catch (const error& e) {
    EXPECT_EQ(std::string(e.what()), file.path().string() +
                                         ":4: allocation of 4096 bytes is larger than the device it is "
                                         "replayed on (4095 bytes)");
  }
}

}  // namespace
}  // namespace tidepool::replay::testing

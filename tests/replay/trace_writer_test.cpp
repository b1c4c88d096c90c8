// Writing RMM replay logs: what the writer writes, the reader reads back identically, plain and gzip.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "replay/trace_reader.hpp"
#include "replay/trace_writer.hpp"
#include "temp_file.hpp"
#include "tidepool/errors.hpp"

namespace tidepool::replay::testing {
namespace {

trace sample() {
  trace t;
  t.events = {
      {trace_action::allocate, 0, 3'600'000'001, 0x7efeb4000000, 154389504, 0},
      {trace_action::allocate, 2, 3'600'000'010, 0x1000, 512, 0x7f00aa},
      {trace_action::allocate_failure, 0, 3'600'000'020, 0, std::size_t{1} << 40, 0},
      {trace_action::free, 1, 86'399'999'999, 0x7efeb4000000, 154389504, 0},
  };
  return t;
}

TEST(TraceWriter, RoundTripsThroughTheReader) {
  for (const std::string suffix : {".csv", ".csv.gz"}) {
    temp_file file(suffix);
    const trace written = sample();
    write_trace(written, file.path());
    const trace read = read_trace(file.path());
    EXPECT_EQ(read.events, written.events) << suffix;
  }
}

TEST(TraceWriter, WritesTheRmmFormat) {
  temp_file file(".csv");
  write_trace(sample(), file.path());
  std::ifstream in(file.path());
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(),
            "Thread,Time,Action,Pointer,Size,Stream\n"
            "0,01:00:00.000001,allocate,0x7efeb4000000,154389504,0x0\n"
            "2,01:00:00.000010,allocate,0x1000,512,0x7f00aa\n"
            "0,01:00:00.000020,allocate failure,0x0,1099511627776,0x0\n"
            "1,23:59:59.999999,free,0x7efeb4000000,154389504,0x0\n");
}

TEST(TraceWriter, NamesAPathItCannotCreate) {
  EXPECT_THROW({ trace_writer writer("/nonexistent/folder/out.csv"); }, tidepool::error);
}

}  // namespace
}  // namespace tidepool::replay::testing

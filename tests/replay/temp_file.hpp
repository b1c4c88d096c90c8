// tests/replay/temp_file.hpp: a file under the test's temporary folder, removed afterwards, and a
// helper that writes text to it (plain, gzip- or, where the build has liblzma, xz-compressed).
#pragma once

#include <zlib.h>
#if TIDEPOOL_HAVE_LZMA
#include <lzma.h>
#endif

#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace tidepool::replay::testing {

/// A path unique to the running test, deleted when it goes out of scope.
class temp_file {
 public:
  explicit temp_file(const std::string& suffix) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (std::string("tidepool_") + info->test_suite_name() + "_" + info->name() + "_" +
             std::to_string(counter()++) + suffix);
  }
  ~temp_file() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

  /// Writes `text`, compressed when the path ends in .gz or .xz (.xz only in a build with
  /// liblzma: the test fails otherwise).
  void write(const std::string& text) const {
    if (path_.extension() == ".xz") {
#if TIDEPOOL_HAVE_LZMA
      std::string packed(lzma_stream_buffer_bound(text.size()), '\0');
      std::size_t packed_size = 0;
      ASSERT_EQ(lzma_easy_buffer_encode(6, LZMA_CHECK_CRC64, nullptr, reinterpret_cast<const std::uint8_t*>(text.data()),
                                        text.size(), reinterpret_cast<std::uint8_t*>(packed.data()), &packed_size,
                                        packed.size()),
                LZMA_OK);
      packed.resize(packed_size);
      write_bytes(packed);
#else
      FAIL() << "this build has no liblzma to write " << path_;
#endif
    } else if (path_.extension() == ".gz") {
      gzFile f = gzopen(path_.c_str(), "wb");
      ASSERT_NE(f, nullptr);
      ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
      ASSERT_EQ(gzclose(f), Z_OK);
    } else {
      write_bytes(text);
    }
  }

 private:
  // Writes `bytes` as they are.
  void write_bytes(const std::string& bytes) const {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    ASSERT_EQ(std::fclose(f), 0);
  }

  static int& counter() {
    static int n = 0;
    return n;
  }
  std::filesystem::path path_;
};

}  // namespace tidepool::replay::testing

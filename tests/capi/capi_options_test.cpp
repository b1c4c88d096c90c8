// Tests of the C API's pool options and of tidepool_last_status().
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "process/process_fixture.hpp"
#include "tidepool/c_api.h"

namespace tidepool::testing {
namespace {

using CApiOptions = process_test;

TEST_F(CApiOptions, PoolsMadeAfterwardsGetTheOptions) {
  use_small_sim(2);
  tidepool_pool_options_t options{};
  options.struct_size = sizeof options;
  ASSERT_EQ(tidepool_get_default_pool_options(&options), TIDEPOOL_SUCCESS);
  EXPECT_EQ(options.byte_cap, UINT64_MAX);  // the defaults
  EXPECT_EQ(options.immediate_release, 0);
  options.byte_cap = 128 * MiB;
  options.headroom = 16 * MiB;
  options.decay_milliseconds = 250;
  EXPECT_EQ(options.growth_slack, pool_options{}.growth_slack);
  options.growth_slack = 0.25;
  ASSERT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_SUCCESS);
  const pool_options& made = device_pool(1).options();
  EXPECT_EQ(made.growth_slack, 0.25);
  EXPECT_EQ(made.byte_cap, 128 * MiB);
  EXPECT_EQ(made.headroom, 16 * MiB);
  EXPECT_EQ(made.release.decay.count(), 250);
  void* ptr = nullptr;
  EXPECT_EQ(tidepool_allocate(256 * MiB, 1, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_OUT_OF_MEMORY);
  std::size_t available = 0;
  ASSERT_EQ(tidepool_available_bytes(1, &available), TIDEPOOL_SUCCESS);
  EXPECT_LE(available, 128 * MiB);
}

TEST_F(CApiOptions, AliasOptionsReachThePoolAndBadOnesAreRefused) {
  use_small_sim(2);
  tidepool_pool_options_t options{};
  options.struct_size = sizeof options;
  ASSERT_EQ(tidepool_get_default_pool_options(&options), TIDEPOOL_SUCCESS);
  EXPECT_EQ(options.alias_free_handles, 0);  // off by default
  EXPECT_EQ(options.alias_slack, pool_options{}.alias_slack);
  const tidepool_pool_options_t defaults = options;
  options.alias_free_handles = 2;
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("alias_free_handles is 2: expected 0 or 1"), std::string::npos)
      << tidepool_last_error();
  options = defaults;
  options.alias_slack = -0.5;
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("alias_slack is -0.5"), std::string::npos)
      << tidepool_last_error();
  options = defaults;
  options.reserved3_ = 1;
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("reserved3_ is 1"), std::string::npos) << tidepool_last_error();

  options = defaults;
  options.alias_free_handles = 1;
  options.alias_slack = 0.05;
  ASSERT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_SUCCESS) << tidepool_last_error();
  // A caller whose struct ends before the alias fields leaves them as they are.
  tidepool_pool_options_t older = defaults;
  older.struct_size = offsetof(tidepool_pool_options_t, alias_free_handles);
  older.alias_free_handles = 0;
  ASSERT_EQ(tidepool_set_default_pool_options(&older), TIDEPOOL_SUCCESS) << tidepool_last_error();
  const pool_options& made = device_pool(1).options();
  EXPECT_TRUE(made.alias_free_handles);
  EXPECT_EQ(made.alias_slack, 0.05);
}

// A 0-or-1 field of tidepool_pool_options_t: its default, a bad value refused with the field's
// name, the reserved field after it refused when not zero, the other value reaching the pools made
// afterwards, and a caller whose struct ends before the field leaving it as it is.
struct flag_field {
  std::int32_t tidepool_pool_options_t::*field;
  std::int32_t tidepool_pool_options_t::*reserved_after;
  const char* name;
  std::int32_t default_value;
  bool tidepool::pool_options::*option;
  std::size_t offset;
};

void expect_flag_reaches_the_pool(const flag_field& f) {
  tidepool_pool_options_t options{};
  options.struct_size = sizeof options;
  ASSERT_EQ(tidepool_get_default_pool_options(&options), TIDEPOOL_SUCCESS);
  EXPECT_EQ(options.*f.field, f.default_value) << f.name;
  const tidepool_pool_options_t defaults = options;
  options.*f.field = 2;
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find(std::string(f.name) + " is 2: expected 0 or 1"), std::string::npos)
      << tidepool_last_error();
  options = defaults;
  options.*f.reserved_after = 3;
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT) << f.name;
  options = defaults;
  options.*f.field = 1 - f.default_value;
  ASSERT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_SUCCESS) << tidepool_last_error();
  tidepool_pool_options_t older = defaults;
  older.struct_size = f.offset;
  ASSERT_EQ(tidepool_set_default_pool_options(&older), TIDEPOOL_SUCCESS) << tidepool_last_error();
  EXPECT_EQ(device_pool(1).options().*f.option, f.default_value == 0) << f.name;
}

TEST_F(CApiOptions, FollowGraphCapturesReachesThePoolAndBadValuesAreRefused) {
  use_small_sim(2);
  expect_flag_reaches_the_pool({&tidepool_pool_options_t::follow_graph_captures, &tidepool_pool_options_t::reserved4_,
                                "follow_graph_captures", 1, &tidepool::pool_options::follow_graph_captures,
                                offsetof(tidepool_pool_options_t, follow_graph_captures)});
}

TEST_F(CApiOptions, CompactOnOutOfMemoryReachesThePoolAndBadValuesAreRefused) {
  use_small_sim(2);
  expect_flag_reaches_the_pool({&tidepool_pool_options_t::compact_on_out_of_memory,
                                &tidepool_pool_options_t::reserved5_, "compact_on_out_of_memory", 0,
                                &tidepool::pool_options::compact_on_out_of_memory,
                                offsetof(tidepool_pool_options_t, compact_on_out_of_memory)});
}

TEST_F(CApiOptions, AnOlderCallersStructChangesOnlyItsFields) {
  use_small_sim();
  tidepool_pool_options_t full{};
  full.struct_size = sizeof full;
  full.byte_cap = UINT64_MAX;
  full.small_size_threshold = MiB;
  full.max_cached_bytes = 64 * MiB;  // set now, outside the older struct below
  full.headroom = 0;
  ASSERT_EQ(tidepool_set_default_pool_options(&full), TIDEPOOL_SUCCESS);
  tidepool_pool_options_t older{};
  older.struct_size = offsetof(tidepool_pool_options_t, small_size_threshold);  // cap, headroom
  older.byte_cap = 512 * MiB;
  older.headroom = 8 * MiB;
  older.max_cached_bytes = 1;  // beyond its struct_size: ignored
  ASSERT_EQ(tidepool_set_default_pool_options(&older), TIDEPOOL_SUCCESS);
  tidepool_pool_options_t now{};
  now.struct_size = sizeof now;
  ASSERT_EQ(tidepool_get_default_pool_options(&now), TIDEPOOL_SUCCESS);
  EXPECT_EQ(now.byte_cap, 512 * MiB);
  EXPECT_EQ(now.headroom, 8 * MiB);
  EXPECT_EQ(now.max_cached_bytes, 64 * MiB);
}

TEST_F(CApiOptions, BadOptionsAreRefusedAndChangeNothing) {
  use_small_sim();
  tidepool_pool_options_t options{};
  options.struct_size = sizeof options;
  ASSERT_EQ(tidepool_get_default_pool_options(&options), TIDEPOOL_SUCCESS);
  options.immediate_release = 2;
  options.byte_cap = MiB;
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("immediate_release is 2"), std::string::npos);
  EXPECT_EQ(tidepool_last_status(), TIDEPOOL_INVALID_ARGUMENT);
  options.immediate_release = 0;
  options.growth_slack = -0.5;
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("growth_slack is -0.5"), std::string::npos);
  EXPECT_EQ(device_pool(0).options().byte_cap, SIZE_MAX);
  options.struct_size = 0;
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_set_default_pool_options(nullptr), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(tidepool_get_default_pool_options(nullptr), TIDEPOOL_INVALID_ARGUMENT);
}

// A struct_size that ends inside a field would have part of it read (half a byte_cap taken with
// the default's other half) or written; reserved fields must be zero. Both are refused by name and
// change nothing; a newer header's larger struct is taken for the fields this library knows.
TEST_F(CApiOptions, AStructSizeInsideAFieldAndReservedFieldsAreRefused) {
  use_small_sim();
  tidepool_pool_options_t options{};
  options.struct_size = sizeof options;
  ASSERT_EQ(tidepool_get_default_pool_options(&options), TIDEPOOL_SUCCESS);
  const tidepool_pool_options_t defaults = options;
  options.byte_cap = 512 * MiB;
  options.struct_size = offsetof(tidepool_pool_options_t, headroom) - 4;  // half of byte_cap
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("struct_size is 12, which ends inside a field of "
                                                    "tidepool_pool_options_t"),
            std::string::npos)
      << tidepool_last_error();
  tidepool_pool_options_t read{};
  read.struct_size = 12;
  read.byte_cap = 5;
  EXPECT_EQ(tidepool_get_default_pool_options(&read), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_EQ(read.byte_cap, 5u) << "nothing written";

  options.struct_size = sizeof options;
  options.reserved_ = 7;
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("reserved_ is 7; it is reserved and must be zero"),
            std::string::npos)
      << tidepool_last_error();
  options.reserved_ = 0;
  options.reserved2_ = -1;
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("reserved2_ is -1"), std::string::npos);
  tidepool_pool_options_t now{};
  now.struct_size = sizeof now;
  ASSERT_EQ(tidepool_get_default_pool_options(&now), TIDEPOOL_SUCCESS);
  EXPECT_EQ(now.byte_cap, defaults.byte_cap) << "a refused call changes nothing";

  // A struct that ends where a field ends, and a newer header's larger one, are taken.
  struct newer {
    tidepool_pool_options_t known;
    std::uint64_t unknown;
  } bigger{};
  bigger.known = defaults;
  bigger.known.struct_size = sizeof bigger;
  bigger.known.byte_cap = 256 * MiB;
  EXPECT_EQ(tidepool_set_default_pool_options(&bigger.known), TIDEPOOL_SUCCESS) << tidepool_last_error();
  ASSERT_EQ(tidepool_get_default_pool_options(&now), TIDEPOOL_SUCCESS);
  EXPECT_EQ(now.byte_cap, 256 * MiB);
  options = defaults;
  options.struct_size = offsetof(tidepool_pool_options_t, reserved_);  // ends after immediate_release
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_SUCCESS) << tidepool_last_error();
}

TEST_F(CApiOptions, ASharingOptionsSizeInsideAFieldIsRefused) {
  tidepool_sharing_options_t sharing{};
  sharing.struct_size = offsetof(tidepool_sharing_options_t, wait_milliseconds) + 4;
  sharing.wait_milliseconds = 5;
  EXPECT_EQ(tidepool_get_sharing_options(&sharing), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("ends inside a field of tidepool_sharing_options_t"),
            std::string::npos)
      << tidepool_last_error();
  EXPECT_EQ(sharing.wait_milliseconds, 5u);
  EXPECT_EQ(tidepool_set_sharing_options(&sharing), TIDEPOOL_INVALID_ARGUMENT);
  sharing.struct_size = offsetof(tidepool_sharing_options_t, wait_milliseconds);  // an older caller's
  EXPECT_EQ(tidepool_get_sharing_options(&sharing), TIDEPOOL_SUCCESS);
  EXPECT_EQ(sharing.wait_milliseconds, 5u) << "past its struct: untouched";
}

TEST_F(CApiOptions, ByteCountsPastTwoToThe63AreRefusedAsNegative) {
  use_small_sim();
  tidepool_pool_options_t options{};
  options.struct_size = sizeof options;
  ASSERT_EQ(tidepool_get_default_pool_options(&options), TIDEPOOL_SUCCESS);
  const tidepool_pool_options_t defaults = options;
  const std::int64_t minus_five = -5;
  options.headroom = static_cast<std::uint64_t>(minus_five);  // what a C caller's -5 becomes
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("headroom is 18446744073709551611 bytes (-5 as a signed"),
            std::string::npos)
      << tidepool_last_error();
  options = defaults;
  options.byte_cap = std::uint64_t{1} << 63;
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("byte_cap is"), std::string::npos);
  options = defaults;
  options.max_cached_bytes = UINT64_MAX - 1;
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("max_cached_bytes is"), std::string::npos);
  // Nothing changed; "no limit" (UINT64_MAX) and the largest count are still accepted.
  EXPECT_EQ(detail::default_pool_options().headroom, 0u);
  options = defaults;
  options.byte_cap = UINT64_MAX;
  options.headroom = (std::uint64_t{1} << 63) - 1;
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_SUCCESS);
}

TEST_F(CApiOptions, OptionsSetOnceAPoolExistsAreRefusedNamingThePool) {
  use_small_sim(3);
  tidepool_pool_options_t options{};
  options.struct_size = sizeof options;
  ASSERT_EQ(tidepool_get_default_pool_options(&options), TIDEPOOL_SUCCESS);
  void* ptr = nullptr;
  ASSERT_EQ(tidepool_allocate(MiB, 2, nullptr, TIDEPOOL_SCRATCH, &ptr), TIDEPOOL_SUCCESS);
  options.byte_cap = 64 * MiB;
  EXPECT_EQ(tidepool_set_default_pool_options(&options), TIDEPOOL_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tidepool_last_error()).find("before the first allocation: the pool of device(s) 2 exists"),
            std::string::npos)
      << tidepool_last_error();
  EXPECT_EQ(detail::default_pool_options().byte_cap, SIZE_MAX);  // unchanged, for every pool made later too
  EXPECT_EQ(device_pool(0).options().byte_cap, SIZE_MAX);
  EXPECT_EQ(tidepool_deallocate(ptr, 2, nullptr), TIDEPOOL_SUCCESS);
}

TEST_F(CApiOptions, LastStatusSaysWhatANullMeant) {
  auto& sim = use_small_sim();
  sim.set_capacity_limit(0, 64 * MiB);
  EXPECT_EQ(tidepool_cupy_malloc(nullptr, 128 * MiB, 0), nullptr);
  EXPECT_EQ(tidepool_last_status(), TIDEPOOL_OUT_OF_MEMORY);
  EXPECT_EQ(tidepool_cupy_malloc(nullptr, MiB, 4), nullptr);
  EXPECT_EQ(tidepool_last_status(), TIDEPOOL_INVALID_DEVICE);
}

}  // namespace
}  // namespace tidepool::testing

# Precompiled headers: the third-party and standard headers that most files of a target include,
# parsed once per build instead of once in every file.
#
# Every test file parses gtest.h, most of a small test's compile time, and every file of the command
# line parses CLI11, which ships no compiled form in the version Debian packages. The suite builds
# each of these twice (Release, and with AddressSanitizer), so this is where its build time goes
# (the figures: docs/RESULTS.md, "Each row's history", the suite's fifty-first session).
#
# Three headers, each built once per build tree: one that every test reuses (it belongs to the
# small target tidepool_test_pch, since a header reused across targets must have one owner), one
# the layers of src/ reuse, one for the command line. Reuse needs the same compiler flags in owner
# and user; GCC refuses a header built with others (-Winvalid-pch, an error under -Werror), so a
# flag that diverges shows at once. Off, every file parses its headers itself, as it must compile
# without them: each file still includes what it uses.
option(TIDEPOOL_PRECOMPILED_HEADERS "Precompile the headers shared by the tests, the layers and the command line" ON)

# The standard headers the files of tests/, src/ and tools/ include most (counted over the three).
set(tidepool_common_std_headers <algorithm> <atomic> <chrono> <cstddef> <cstdint> <cstdio> <cstdlib>
    <cstring> <functional> <map> <memory> <mutex> <optional> <string> <utility> <vector>)

# The owner of the tests' header: an object library of one empty file, compiled like every test.
function(tidepool_make_test_pch)
  if(NOT TIDEPOOL_PRECOMPILED_HEADERS OR TARGET tidepool_test_pch)
    return()
  endif()
  add_library(tidepool_test_pch OBJECT ${PROJECT_SOURCE_DIR}/tests/precompiled_header_owner.cpp)
  target_link_libraries(tidepool_test_pch PRIVATE GTest::gtest tidepool_fmt)
  target_precompile_headers(tidepool_test_pch PRIVATE <gtest/gtest.h> <fmt/format.h>
                            ${tidepool_common_std_headers} <random> <set> <thread>)
endfunction()

# Makes test target `name` use the tests' precompiled header.
function(tidepool_use_test_pch name)
  if(TIDEPOOL_PRECOMPILED_HEADERS)
    target_precompile_headers(${name} REUSE_FROM tidepool_test_pch)
  endif()
endfunction()

# Makes the layers of src/ named (device core ..., each the object library tidepool_<layer>) share
# one precompiled header, owned by the first. The layers are compiled alike (position-independent,
# hidden visibility); their defines differ only in names the headers below never read.
function(tidepool_use_layer_pch first)
  if(NOT TIDEPOOL_PRECOMPILED_HEADERS)
    return()
  endif()
  target_precompile_headers(tidepool_${first} PRIVATE <fmt/format.h> ${tidepool_common_std_headers})
  foreach(layer IN LISTS ARGN)
    target_precompile_headers(tidepool_${layer} REUSE_FROM tidepool_${first})
  endforeach()
endfunction()

# Gives the command line's target (one target: no reuse) its own precompiled header.
function(tidepool_use_cli_pch name)
  if(TIDEPOOL_PRECOMPILED_HEADERS)
    target_precompile_headers(${name} PRIVATE <CLI/CLI.hpp> <nlohmann/json.hpp> <fmt/format.h>
                              ${tidepool_common_std_headers})
  endif()
endfunction()

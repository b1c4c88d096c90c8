# Compiler warnings and sanitizers, applied to every target of the project.
add_compile_options(-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
                    -Wnon-virtual-dtor -Woverloaded-virtual)
if(TIDEPOOL_WERROR)
  add_compile_options(-Werror)
endif()
if(TIDEPOOL_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
# ThreadSanitizer cannot share a process with AddressSanitizer, hence a build of its own
# (scripts/test.sh runs the tests labelled `threads` in it).
if(TIDEPOOL_SANITIZE_THREAD)
  if(TIDEPOOL_SANITIZE)
    message(FATAL_ERROR "TIDEPOOL_SANITIZE_THREAD and TIDEPOOL_SANITIZE cannot be combined")
  endif()
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()
# libFuzzer (clang only): every object gets coverage instrumentation and ASan+UBSan; the fuzz
# targets link the fuzzer's main (tests/fuzz/CMakeLists.txt).
if(TIDEPOOL_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "TIDEPOOL_FUZZ needs clang (CMAKE_CXX_COMPILER=clang++)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
# GCC 13 reports -Warray-bounds inside fmt 9's own headers (bigint in format_dragon, inlined into
# every file that formats a floating-point number now that fmt is header-only): a known false
# positive of that compiler on that code, not ours. It stays a warning there, not an error. The
# same compiler (g++ 13 of the GPU machine, at -O3) reports -Wstringop-overflow in std::vector<int>'s
# copy inside sim_config's implicit copy constructor: the same false positive family in libstdc++.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 13)
  add_compile_options(-Wno-error=array-bounds -Wno-error=stringop-overflow)
endif()

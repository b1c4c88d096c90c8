# fmt for every target of the project, as the target `tidepool_fmt`.
#
# libtidepool.so must need no libfmt at run time (src/CMakeLists.txt), so fmt's code goes into it.
# Header-only mode does that by compiling fmt's implementation (format-inl.h: float formatting,
# vformat, the error paths) into every file that includes fmt, about 6.5 s of CPU per file at -O3
# with fmt 9 and GCC 12, in each of the suite's builds. With fmt 9 the implementation is compiled
# once instead (src/fmt_once.cpp, fmt's explicit instantiations of that version) into a static
# library of position-independent, hidden objects that the shared library, the tools, the tests and
# the benchmarks link; every other file includes fmt's headers without FMT_HEADER_ONLY. Other fmt
# versions (whose instantiation lists differ) keep header-only mode.
if(fmt_VERSION VERSION_GREATER_EQUAL 9 AND fmt_VERSION VERSION_LESS 10)
  add_library(tidepool_fmt STATIC ${PROJECT_SOURCE_DIR}/src/fmt_once.cpp)
  set_target_properties(tidepool_fmt PROPERTIES
    POSITION_INDEPENDENT_CODE ON
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  get_target_property(tidepool_fmt_includes fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  target_include_directories(tidepool_fmt SYSTEM PUBLIC ${tidepool_fmt_includes})
  message(STATUS "fmt ${fmt_VERSION}: compiled once (src/fmt_once.cpp)")
else()
  add_library(tidepool_fmt INTERFACE)
  target_link_libraries(tidepool_fmt INTERFACE fmt::fmt-header-only)
  message(STATUS "fmt ${fmt_VERSION}: header-only")
endif()

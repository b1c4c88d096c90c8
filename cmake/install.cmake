# What `cmake --install` puts in a prefix for C and C++ programs: libtidepool.so with its SONAME
# links, the headers, tidepoolConfig.cmake (+ version and targets files, exporting
# tidepool::tidepool) and tidepool.pc. The `tidepool` command is installed by tools/, the Python
# package by python/. tests/install/ checks the installed tree from a consumer's side.
include(CMakePackageConfigHelpers)

set(TIDEPOOL_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/tidepool" CACHE STRING
    "Where `cmake --install` puts tidepoolConfig.cmake (relative to the prefix)")

install(TARGETS tidepool EXPORT tidepoolTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/tidepool DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT library)
install(EXPORT tidepoolTargets NAMESPACE tidepool:: FILE tidepoolTargets.cmake
        DESTINATION ${TIDEPOOL_CMAKE_INSTALL_DIR} COMPONENT library)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tidepoolConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tidepoolConfig.cmake
  INSTALL_DESTINATION ${TIDEPOOL_CMAKE_INSTALL_DIR})
# 0.x: a new minor version may change the API, so only the same major.minor matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tidepoolConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tidepoolConfig.cmake ${PROJECT_BINARY_DIR}/tidepoolConfigVersion.cmake
        DESTINATION ${TIDEPOOL_CMAKE_INSTALL_DIR} COMPONENT library)

# From <prefix>/<libdir>/pkgconfig back to <prefix>, e.g. "../.." (the .pc file is relocatable).
file(RELATIVE_PATH tidepool_pc_up "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" tidepool_pc_up "${tidepool_pc_up}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/tidepool.pc.in ${PROJECT_BINARY_DIR}/tidepool.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tidepool.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT library)

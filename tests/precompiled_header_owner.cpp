// Empty on purpose: the one source of tidepool_test_pch, the target that owns the precompiled header
// every test binary reuses (cmake/precompiled_headers.cmake). A target needs a source of its own to
// build the header; the header holds what the tests include, this file nothing.

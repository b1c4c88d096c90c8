/* tidepool/export.h: TIDEPOOL_API marks what libtidepool.so exports.
 *
 * The library is compiled with hidden visibility (src/CMakeLists.txt) and linked with a version
 * script (src/exports.map), so that it exports its public API only: the C API (c_api.h) and the
 * public C++ classes and functions of include/tidepool/. Everything else, tidepool::detail, the
 * instantiations of standard and fmt templates, stays inside: a program that loads the library
 * (PyTorch, CuPy, anything a Python process imports) never binds one of its own symbols to ours,
 * nor ours to its. Used by C and C++ headers alike. */
#ifndef TIDEPOOL_EXPORT_H
#define TIDEPOOL_EXPORT_H

#if defined(__GNUC__)
#define TIDEPOOL_API __attribute__((visibility("default")))
#else
#define TIDEPOOL_API
#endif

#endif /* TIDEPOOL_EXPORT_H */

// allocation_streams.hpp: the stream each CuPy allocation was made on. CuPy's free passes no
// stream, and a block must be freed on the stream that used it (as CuPy's own pool does, one arena
// per stream), not on whatever stream is current when the garbage collector frees it.
#pragma once

#include "tidepool/driver.hpp"

namespace tidepool::detail {

/// Remembers that `ptr` was allocated on `stream`. Only non-default streams are stored.
void remember_allocation_stream(void* ptr, stream_t stream);
/// Forgets `ptr` and returns the stream it was allocated on (nullptr if none was stored).
stream_t take_allocation_stream(void* ptr);
/// Puts back what take_allocation_stream removed, when the free then failed.
void restore_allocation_stream(void* ptr, stream_t stream);

}  // namespace tidepool::detail

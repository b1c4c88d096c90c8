// Each thread's lifetime hint for the framework entry points: PyTorch's pluggable allocator and
// CuPy's CFunctionAllocator pass no hint, so a program marks what lives long (a model's weights,
// an optimizer's state as its first step makes it) by setting the hint of the thread that
// allocates it around that code (tidepool.persistent() in Python). Thread-local, as PyTorch's own
// routing of allocations to a MemPool is, so other threads' scratch is never placed apart by it.
#include "capi/thread_lifetime.hpp"

namespace tidepool::detail {
namespace {
thread_local lifetime hint_of_thread = lifetime::scratch;
}

lifetime thread_lifetime() noexcept { return hint_of_thread; }

void set_thread_lifetime(lifetime hint) noexcept { hint_of_thread = hint; }

}  // namespace tidepool::detail

// replay/loader_workload.hpp: a generator of the loader workload of DESIGN 1.1, the one that
// strands memory in caching pools.
//
// Seven inputs are loaded, each in 16 chunks. A chunk allocates about 2.4 GB of scratch in several
// arrays and, interleaved with them, keeps about 76 MB in arrays of varied sizes (36 KiB to
// tens of MB); then it frees its scratch. Once all inputs are loaded, a 62-region merge does the
// same with about 1.95 GB of scratch per region and keeps about 95 MB per region (one array of
// about 70 MiB among them). Then the inputs close: their kept arrays are freed, and the merge's
// results stay live at the end of the trace. Peak live is about 15.1 GiB, live after close
// about 5.5 GiB, as measured in DESIGN 1.1. The scratch of an input's chunks (and of the merge's
// regions) follows one uneven split into arrays, each varying +-2% from chunk to chunk; kept
// sizes vary by +-10%; all are multiples of 512 B. Pointers come from a bump allocator (never
// reused), times advance 10 us per row.
#pragma once

#include <cstddef>
#include <cstdint>

#include "replay/trace.hpp"

namespace tidepool::replay {

/// The shape of the loader workload; the defaults are DESIGN 1.1's.
struct loader_shape {
  int inputs = 7;
  int chunks_per_input = 16;
  std::size_t chunk_scratch_bytes = 2'400'000'000;
  int chunk_scratch_arrays = 6;
  int regions = 62;
  std::size_t region_scratch_bytes = 1'950'000'000;
  int region_scratch_arrays = 5;
  /// Scratch arrays of every chunk of an input (and every merge region) share one uneven split of
  /// the scratch bytes, each array varying by this fraction from chunk to chunk.
  double scratch_jitter = 0.02;
};

/// The loader workload as a trace named "loader.csv.gz"; the same seed gives the same trace.
[[nodiscard]] trace make_loader_trace(std::uint64_t seed = 1, const loader_shape& shape = {});

}  // namespace tidepool::replay

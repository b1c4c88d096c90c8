// The loader workload generator: chunks of scratch with kept arrays interleaved, a merge, a close.
#include "replay/loader_workload.hpp"

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

namespace tidepool::replay {

namespace {

constexpr std::size_t kib = std::size_t{1} << 10;
constexpr std::size_t mib = std::size_t{1} << 20;

// Kept arrays of one chunk, about 76 MB: two of tens of MB, then sizes down to 36 KiB.
struct kept_kind {
  std::size_t bytes;
  int count;
};
constexpr kept_kind chunk_kept[] = {
    {24'800 * kib, 2}, {4'700'000, 3}, {1'200'000, 4}, {600 * kib, 6}, {36 * kib, 40}};
// Kept arrays of one merge region, about 95 MB: one of 70 MiB, then smaller ones.
constexpr kept_kind region_kept[] = {{70 * mib, 1}, {4'700'000, 3}, {1'200'000, 4}, {600 * kib, 5}, {36 * kib, 8}};

class generator {
 public:
  explicit generator(std::uint64_t seed) : random_(seed) { t_.name = "loader.csv.gz"; }

  // A size near `bytes` (+-10%), a multiple of 512 B.
  std::size_t vary(std::size_t bytes) {
    std::uniform_real_distribution<double> factor(0.9, 1.1);
    const auto varied = static_cast<std::size_t>(static_cast<double>(bytes) * factor(random_));
    return std::max<std::size_t>(512, (varied + 511) / 512 * 512);
  }

  std::uintptr_t allocate(std::size_t bytes) {
    const std::uintptr_t pointer = next_pointer_;
    next_pointer_ += (bytes + 511) / 512 * 512;
    row(trace_action::allocate, pointer, bytes);
    return pointer;
  }

  void free(std::uintptr_t pointer, std::size_t bytes) { row(trace_action::free, pointer, bytes); }

  // How `scratch_bytes` is split into `arrays` scratch arrays: uneven, and the same for every
  // chunk of an input (or every region of the merge), as one program's chunks have one shape.
  std::vector<std::size_t> scratch_layout(std::size_t scratch_bytes, int arrays) {
    std::vector<double> weights(static_cast<std::size_t>(arrays));
    std::uniform_real_distribution<double> weight(0.6, 1.4);
    double sum = 0;
    for (double& w : weights) sum += (w = weight(random_));
    std::vector<std::size_t> sizes;
    for (const double w : weights) {
      sizes.push_back(static_cast<std::size_t>(static_cast<double>(scratch_bytes) * w / sum) / 512 * 512);
    }
    return sizes;
  }

  // One chunk or region: scratch arrays with the kept arrays spread between them, then the
  // scratch freed. Returns the kept arrays (pointer, size).
  // Each scratch array is its layout's size within +-`scratch_jitter` (chunks of one input are
  // nearly, not exactly, alike: exact repeats would let a caching pool reuse blocks whole).
  std::vector<std::pair<std::uintptr_t, std::size_t>> stage(const std::vector<std::size_t>& scratch_sizes,
                                                            double scratch_jitter, const kept_kind* kinds,
                                                            std::size_t kind_count) {
    std::vector<std::size_t> kept_sizes;
    for (std::size_t k = 0; k < kind_count; ++k) {
      for (int i = 0; i < kinds[k].count; ++i) kept_sizes.push_back(vary(kinds[k].bytes));
    }
    std::shuffle(kept_sizes.begin(), kept_sizes.end(), random_);
    std::vector<std::pair<std::uintptr_t, std::size_t>> scratch, kept;
    std::size_t next_kept = 0;
    std::uniform_real_distribution<double> jitter(1.0 - scratch_jitter, 1.0 + scratch_jitter);
    for (std::size_t s = 0; s < scratch_sizes.size(); ++s) {
      const auto bytes = static_cast<std::size_t>(static_cast<double>(scratch_sizes[s]) * jitter(random_)) / 512 * 512;
      scratch.emplace_back(allocate(bytes), bytes);
      const std::size_t until = kept_sizes.size() * (s + 1) / scratch_sizes.size();
      for (; next_kept < until; ++next_kept) kept.emplace_back(allocate(kept_sizes[next_kept]), kept_sizes[next_kept]);
    }
    for (const auto& [pointer, bytes] : scratch) free(pointer, bytes);
    return kept;
  }

  trace take() { return std::move(t_); }

 private:
  void row(trace_action action, std::uintptr_t pointer, std::size_t bytes) {
    trace_event e;
    e.action = action;
    e.time_us = time_us_;
    time_us_ += 10;
    e.pointer = pointer;
    e.size = bytes;
    t_.events.push_back(e);
  }

  std::mt19937_64 random_;
  trace t_;
  std::uintptr_t next_pointer_ = 0x7f0000000000;
  std::int64_t time_us_ = 0;
};

}  // namespace

trace make_loader_trace(std::uint64_t seed, const loader_shape& shape) {
  generator g(seed);
  std::vector<std::pair<std::uintptr_t, std::size_t>> inputs_kept;
  for (int input = 0; input < shape.inputs; ++input) {
    const auto layout = g.scratch_layout(shape.chunk_scratch_bytes, shape.chunk_scratch_arrays);
    for (int chunk = 0; chunk < shape.chunks_per_input; ++chunk) {
      const auto kept = g.stage(layout, shape.scratch_jitter, chunk_kept, std::size(chunk_kept));
      inputs_kept.insert(inputs_kept.end(), kept.begin(), kept.end());
    }
  }
  const auto merge_layout = g.scratch_layout(shape.region_scratch_bytes, shape.region_scratch_arrays);
  for (int region = 0; region < shape.regions; ++region) {
    (void)g.stage(merge_layout, shape.scratch_jitter, region_kept, std::size(region_kept));
  }
  for (const auto& [pointer, bytes] : inputs_kept) g.free(pointer, bytes);  // the inputs close
  return g.take();
}

}  // namespace tidepool::replay

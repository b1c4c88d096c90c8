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
constexpr kept_kind region_kept[] = {{70 * mib, 1}, {4'700'000, 3}, {1'200'000, 4}, {600 * kib, 4}, {36 * kib, 4}};

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

  // One chunk or region: scratch arrays with the kept arrays spread between them, then the
  // scratch freed. Returns the kept arrays (pointer, size).
  std::vector<std::pair<std::uintptr_t, std::size_t>> stage(std::size_t scratch_bytes, int scratch_arrays,
                                                            const kept_kind* kinds, std::size_t kind_count) {
    std::vector<std::size_t> kept_sizes;
    for (std::size_t k = 0; k < kind_count; ++k) {
      for (int i = 0; i < kinds[k].count; ++i) kept_sizes.push_back(vary(kinds[k].bytes));
    }
    std::shuffle(kept_sizes.begin(), kept_sizes.end(), random_);
    // Scratch split unevenly into arrays that add up to scratch_bytes.
    std::vector<double> weights(static_cast<std::size_t>(scratch_arrays));
    std::uniform_real_distribution<double> weight(0.6, 1.4);
    double sum = 0;
    for (double& w : weights) sum += (w = weight(random_));
    std::vector<std::pair<std::uintptr_t, std::size_t>> scratch, kept;
    std::size_t next_kept = 0;
    for (std::size_t s = 0; s < weights.size(); ++s) {
      const auto bytes = static_cast<std::size_t>(static_cast<double>(scratch_bytes) * weights[s] / sum) / 512 * 512;
      scratch.emplace_back(allocate(bytes), bytes);
      const std::size_t until = kept_sizes.size() * (s + 1) / weights.size();
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
    for (int chunk = 0; chunk < shape.chunks_per_input; ++chunk) {
      const auto kept = g.stage(shape.chunk_scratch_bytes, shape.chunk_scratch_arrays, chunk_kept, std::size(chunk_kept));
      inputs_kept.insert(inputs_kept.end(), kept.begin(), kept.end());
    }
  }
  for (int region = 0; region < shape.regions; ++region) {
    (void)g.stage(shape.region_scratch_bytes, shape.region_scratch_arrays, region_kept, std::size(region_kept));
  }
  for (const auto& [pointer, bytes] : inputs_kept) g.free(pointer, bytes);  // the inputs close
  return g.take();
}

}  // namespace tidepool::replay

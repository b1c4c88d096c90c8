// The replay loop: rows to allocator calls, held memory sampled after every row, time measured
// inside the allocator's calls only.
#include "replay/replay_engine.hpp"

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "replay/replay_allocator.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/sim.hpp"

namespace tidepool::replay {

namespace {

// Real streams of the driver standing for the trace's recorded ones; 0 stays the default stream.
class stream_map {
 public:
  stream_map(driver& drv, int device) : driver_(drv), device_(device) {}
  ~stream_map() {
    for (const auto& [recorded, stream] : streams_) (void)driver_.stream_destroy(device_, stream);
  }
  stream_map(const stream_map&) = delete;
  stream_map& operator=(const stream_map&) = delete;

  stream_t get(std::uintptr_t recorded) {
    if (recorded == 0) return nullptr;
    const auto it = streams_.find(recorded);
    if (it != streams_.end()) return it->second;
    stream_t stream = nullptr;
    const driver_status status = driver_.stream_create(device_, &stream);
    if (status != driver_status::success) detail::throw_driver_failure("replay", driver_call::stream_create, status);
    streams_.emplace(recorded, stream);
    return stream;
  }

 private:
  driver& driver_;
  int device_;
  std::unordered_map<std::uintptr_t, stream_t> streams_;
};

struct live_allocation {
  device_address address;
  std::size_t size;
  stream_t stream;
};

// The bytes of the 2 MiB granules that live blocks touch: the least an allocator that cannot move
// a block, and gives memory back in whole granules, could hold after a release with this layout.
std::size_t granule_bytes_touched(const std::unordered_map<std::uintptr_t, live_allocation>& live) {
  constexpr std::size_t granule = std::size_t{2} << 20;
  std::vector<std::pair<std::size_t, std::size_t>> spans;  // first and last granule of each block
  spans.reserve(live.size());
  for (const auto& [recorded, a] : live) {
    spans.emplace_back(a.address / granule, (a.address + std::max<std::size_t>(a.size, 1) - 1) / granule);
  }
  std::sort(spans.begin(), spans.end());
  std::size_t granules = 0;
  std::size_t next_uncounted = 0;  // the lowest granule above every span counted so far
  for (const auto& [first, last] : spans) {
    const std::size_t from = std::max(first, next_uncounted);
    if (last >= from) granules += last - from + 1;
    next_uncounted = std::max(next_uncounted, last + 1);
  }
  return granules * granule;
}

}  // namespace

replay_result replay_trace(const trace& t, std::string_view allocator_name, const std::shared_ptr<driver>& drv,
                           const replay_options& options) {
  using clock = std::chrono::steady_clock;
  const int device = options.device;
  replay_result r;
  r.trace = t.name;
  r.allocator = std::string(allocator_name);
  r.device = drv->name();

  // The program being replayed has a context on its device before it allocates anything.
  if (const driver_status status = drv->open_context(device); status != driver_status::success) {
    throw error(error_code::driver_failure,
                fmt::format("replay: cannot open the context of device {}: {}", device, to_string(status)));
  }
  r.device_capacity_bytes = drv->memory_info(device).total;
  const driver_call_counts counts_before = drv->call_counts();
  auto* sim = dynamic_cast<sim_driver*>(drv.get());
  std::unique_ptr<replay_allocator> allocator = make_allocator(allocator_name, drv, device, options.tidepool_options);
  auto held = [&] { return sim != nullptr ? sim->physical_bytes(device) : allocator->held_bytes(); };
  const std::size_t held_before = held();  // a context opened by the allocator is not its memory
  auto held_now = [&] {
    const std::size_t h = held();
    return h - std::min(h, held_before);
  };

  stream_map streams(*drv, device);
  std::unordered_map<std::uintptr_t, live_allocation> live;
  std::unordered_set<std::uintptr_t> failed;  // recorded pointers whose allocation failed here
  std::size_t live_bytes = 0;
  clock::duration inside{};
  const std::size_t total = t.events.size();
  const unsigned passes = std::max(1u, options.passes);
  const std::size_t rows_in_all = total * passes;
  const std::size_t progress_every = std::max<std::size_t>(rows_in_all / 100, 1000);
  std::size_t rows_done = 0;
  // Sampling (options.sample_every): peaks since the last sample, and the driver's count.
  std::uint64_t rows_replayed = 0;
  std::size_t sample_live = 0;
  std::size_t sample_held = 0;
  auto take_sample = [&] {
    driver_call_counts c = drv->call_counts();
    c -= counts_before;
    r.samples.push_back({rows_replayed, sample_live, sample_held, c.memory_calls(), c.memory_us()});
    sample_live = live_bytes;
    sample_held = held_now();
  };
  if (options.sample_every != 0) take_sample();

  // The GPU running behind (options.gpu_lag_us): the time each stream's queued work ends.
  std::unordered_map<stream_t, double> stream_tails;
  const bool lagging = sim != nullptr && options.gpu_lag_us > 0.0;
  std::int64_t last_row_us = total != 0 ? t.events[0].time_us : 0;
  double trace_advance_us = 0;  // the clock moved by the trace's own time; the rest is waiting
  auto queue_work = [&](const trace_event& e) {
    // Rows are times of day: a step back (midnight) moves the clock by nothing.
    const auto step = static_cast<double>(std::max<std::int64_t>(0, e.time_us - last_row_us));
    sim->advance(step);
    trace_advance_us += step;
    last_row_us = e.time_us;
    const stream_t stream = streams.get(e.stream);
    double& tail = stream_tails[stream];
    const double start = std::max(sim->now(), tail);
    const double done = sim->now() + options.gpu_lag_us;
    if (done > start) {
      sim->launch(device, stream, done - start);
      tail = done;
    }
  };

  for (unsigned pass = 0; pass < passes; ++pass) {
    pass_result p;
    const driver_call_counts pass_before = drv->call_counts();
    const double clock_before = lagging ? sim->now() : 0.0;
    const double trace_advance_before = trace_advance_us;
    p.peak_live_bytes = live_bytes;
    for (std::size_t i = 0; i < total; ++i) {
      const trace_event& e = t.events[i];
      if (lagging && e.action != trace_action::allocate_failure) queue_work(e);
      if (e.action == trace_action::allocate) {
        const stream_t stream = streams.get(e.stream);
        const auto start = clock::now();
        const std::optional<device_address> address = allocator->allocate(e.size, stream);
        inside += clock::now() - start;
        ++r.operations;
        if (!address) {
          ++r.failures;
          if (!r.first_failure) r.first_failure = failure_point{pass + 1, i + 1, e.size, live_bytes, held_now()};
          failed.insert(e.pointer);
        } else {
          live.emplace(e.pointer, live_allocation{*address, e.size, stream});
          live_bytes += e.size;
          p.peak_live_bytes = std::max(p.peak_live_bytes, live_bytes);
          p.peak_held_bytes = std::max(p.peak_held_bytes, held_now());
        }
      } else if (e.action == trace_action::free) {
        const auto it = live.find(e.pointer);
        if (it == live.end()) {
          if (failed.erase(e.pointer) != 0) continue;  // its allocation failed: nothing to free
          throw error(error_code::invalid_argument,
                      "replay: free of a pointer the trace never allocated (an unchecked trace?)");
        }
        const auto start = clock::now();
        allocator->deallocate(it->second.address, it->second.size, streams.get(e.stream));
        inside += clock::now() - start;
        ++r.operations;
        live_bytes -= it->second.size;
        live.erase(it);
        // Some allocators (a release threshold, an immediate policy) hand memory back on free.
        p.peak_held_bytes = std::max(p.peak_held_bytes, held_now());
      } else if (pass == 0) {
        ++r.recorded_failures;
      }
      if (options.sample_every != 0) {
        ++rows_replayed;
        sample_live = std::max(sample_live, live_bytes);
        sample_held = std::max(sample_held, held_now());
        if (rows_replayed % options.sample_every == 0) take_sample();
      }
      if (options.progress && ++rows_done % progress_every == 0) options.progress(rows_done, rows_in_all);
    }
    if (pass + 1 < passes) {
      // The next pass starts from what this one started from: the trace's leftovers go.
      for (const auto& [recorded, a] : live) {
        const auto start = clock::now();
        allocator->deallocate(a.address, a.size, a.stream);
        inside += clock::now() - start;
        ++r.operations;
      }
      live.clear();
      failed.clear();
      live_bytes = 0;
    }
    if (options.sample_every != 0 && rows_replayed % options.sample_every != 0 && pass + 1 == passes) take_sample();
    driver_call_counts pass_counts = drv->call_counts();
    pass_counts -= pass_before;
    p.driver_calls = pass_counts.memory_calls();
    p.driver_us = pass_counts.memory_us();
    p.by_kind = pass_counts;
    p.waits = pass_counts.wait_calls();
    if (lagging) {
      p.gpu_wait_us = std::max(0.0, (sim->now() - clock_before) - (trace_advance_us - trace_advance_before));
    }
    r.peak_live_bytes = std::max(r.peak_live_bytes, p.peak_live_bytes);
    r.peak_held_bytes = std::max(r.peak_held_bytes, p.peak_held_bytes);
    r.passes.push_back(p);
  }

  r.live_end_bytes = live_bytes;
  r.live_end_allocations = live.size();
  r.live_end_granule_bytes = granule_bytes_touched(live);
  r.held_end_bytes = held_now();
  r.own_held_end_bytes = allocator->held_bytes();
  if (const std::optional<pool_description> d = allocator->describe()) {
    r.cached_end_bytes = d->stats.cached_bytes;
    r.largest_free_end_bytes = d->largest_free_block;
    r.releasable_end_bytes = d->releasable_bytes;
  }
  if (const std::size_t used = drv->memory_info(device).process_used; used != device_memory_info::unknown_bytes) {
    r.process_used_end_bytes = used;
  }
  r.released_bytes = allocator->release();
  r.held_after_release_bytes = held_now();
  if (const std::size_t used = drv->memory_info(device).process_used; used != device_memory_info::unknown_bytes) {
    r.process_used_after_release_bytes = used;
  }
  driver_call_counts counts = drv->call_counts();
  counts -= counts_before;
  r.driver_calls = counts.memory_calls();
  r.driver_us = counts.memory_us();
  r.ns_per_op = r.operations == 0
                    ? 0.0
                    : static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(inside).count()) /
                          static_cast<double>(r.operations);
  // After the figures above: compaction moves bytes, which no baseline does, and its calls are no
  // part of replaying the trace.
  if (allocator->compact()) r.held_after_compact_bytes = held_now();
  if (options.progress) options.progress(rows_in_all, rows_in_all);
  return r;
}

}  // namespace tidepool::replay

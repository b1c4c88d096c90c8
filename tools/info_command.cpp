// tools/info_command.cpp: `tidepool info`, what the driver sees, without opening any context;
// `tidepool info TRACE...`, what each trace asks of an allocator (no allocator needed).
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "device_choice.hpp"
#include "replay/report.hpp"
#include "replay/trace.hpp"
#include "replay/trace_reader.hpp"

namespace tidepool::cli {

namespace {

void print_devices(const std::string& device) {
  const std::shared_ptr<driver> drv = make_driver(device);
  const int count = drv->device_count();
  fmt::print("driver: {}\ndevices: {}\n", drv->name(), count);
  for (int d = 0; d < count; ++d) {
    const bool context = drv->has_context(d);  // asks, never opens one
    const device_memory_info info = drv->memory_info(d);
    fmt::print("device {}: context {}, virtual memory {}, granularity {}\n", d, context ? "open" : "not open",
               drv->supports_virtual_memory(d) ? "yes" : "no", replay::format_bytes(drv->granularity(d)));
    fmt::print("  total {} ({} B), free {} ({} B), held by this process {}\n", replay::format_bytes(info.total),
               info.total, replay::format_bytes(info.free), info.free,
               info.process_used == device_memory_info::unknown_bytes ? std::string("unknown")
                                                                       : replay::format_bytes(info.process_used));
  }
}

// "4 KiB", "256 MiB": a class bound (a power of two of a KiB or more).
std::string bound_text(std::size_t bytes) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  std::size_t value = bytes >> 10;
  unsigned unit = 0;
  while (value >= 1024 && value % 1024 == 0 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{} {}", value, units[unit]);
}

// "up to 64 KiB", "over 4 GiB": the label of a size class.
std::string class_label(const replay::trace_summary& s, std::size_t c) {
  if (c + 1 == s.sizes.size()) return fmt::format("over {}", bound_text(s.sizes[c - 1].upper_bytes));
  return fmt::format("up to {}", bound_text(s.sizes[c].upper_bytes));
}

void print_trace(const std::string& path) {
  const replay::trace t = replay::read_trace(path);
  const replay::trace_summary s = replay::summarize(t);
  fmt::print("{}: {} rows: {} allocate, {} free, {} allocate failure\n", path, s.rows, s.allocations, s.frees,
             s.failures);
  if (s.rows == 0) {
    fmt::print("  empty: no rows after the header\n");
    return;
  }
  fmt::print("  threads {}, streams {}\n", s.threads, s.streams);
  fmt::print("  peak live {} ({} B) in {} allocations\n", replay::format_bytes(s.peak_live_bytes), s.peak_live_bytes,
             s.peak_live_allocations);
  fmt::print("  live at the end {} ({} B) in {} allocations\n", replay::format_bytes(s.live_bytes_at_end),
             s.live_bytes_at_end, s.live_allocations_at_end);
  if (s.allocations == 0) return;
  fmt::print("  sizes: smallest {}, largest {}, {} allocated in all\n", replay::format_bytes(s.smallest_allocation),
             replay::format_bytes(s.largest_allocation), replay::format_bytes(s.allocated_bytes));
  for (std::size_t c = 0; c < s.sizes.size(); ++c) {
    if (s.sizes[c].allocations == 0) continue;
    fmt::print("    {:<16} {:>10} allocations {:>12}\n", class_label(s, c), s.sizes[c].allocations,
               replay::format_bytes(s.sizes[c].bytes));
  }
}

}  // namespace

void add_info_command(CLI::App& app, int& exit_code) {
  struct settings {
    std::string device = "sim";
    std::vector<std::string> traces;
  };
  auto s = std::make_shared<settings>();
  auto* command = app.add_subcommand(
      "info", "The driver and its devices; with traces, what each trace asks (rows, peak live, sizes, streams)");
  command->add_option("traces", s->traces, "RMM replay logs (CSV, plain or gzip) to summarize");
  command->add_option("--device", s->device, "sim or cuda (without a trace)")
      ->check(CLI::IsMember({"sim", "cuda"}))
      ->capture_default_str();
  command->callback([s, &exit_code] {
    if (s->traces.empty()) {
      print_devices(s->device);
    } else {
      for (const std::string& path : s->traces) print_trace(path);
    }
    exit_code = 0;
  });
}

}  // namespace tidepool::cli

// tools/info_command.cpp: `tidepool info`, what the driver sees, without opening any context.
#include <fmt/format.h>

#include "commands.hpp"
#include "device_choice.hpp"
#include "replay/report.hpp"

namespace tidepool::cli {

void add_info_command(CLI::App& app, int& exit_code) {
  auto* command = app.add_subcommand("info", "Print the driver, its devices, which have a context, and their memory");
  auto device = std::make_shared<std::string>("sim");
  command->add_option("--device", *device, "sim or cuda")->check(CLI::IsMember({"sim", "cuda"}))->capture_default_str();
  command->callback([device, &exit_code] {
    const std::shared_ptr<driver> drv = make_driver(*device);
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
    exit_code = 0;
  });
}

}  // namespace tidepool::cli

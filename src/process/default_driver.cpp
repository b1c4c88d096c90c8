// The process's driver: chosen by set_default_driver(), else by the environment (TIDEPOOL_DEVICE,
// TIDEPOOL_SIM_DEVICES, TIDEPOOL_SIM_CAPACITY, TIDEPOOL_SIM_UUID, TIDEPOOL_SIM_SHARED,
// TIDEPOOL_SIM_HOST_MEMORY, and TIDEPOOL_SIM_FAIL: driver failures injected into the sim, so a
// process that reaches tidepool only through the C API, Python, can be fault tested), else the
// CUDA driver. Fixed once a pool exists.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "process/process_state.hpp"
#include "process/text_values.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/process.hpp"
#include "tidepool/sim.hpp"

namespace tidepool {
namespace detail {
namespace {

[[noreturn]] void bad_variable(const char* name, std::string_view value, std::string_view expected) {
  throw error(error_code::invalid_argument,
              fmt::format("{}='{}' is not valid: expected {}", name, value, expected));
}

sim_config sim_config_from_environment() {
  sim_config config;
  if (auto devices = environment("TIDEPOOL_SIM_DEVICES"); !devices.empty()) {
    std::uint64_t count = 0;
    constexpr std::uint64_t max_devices = 64;
    if (!parse_count(devices, &count) || count == 0 || count > max_devices) {
      bad_variable("TIDEPOOL_SIM_DEVICES", devices, "a number of devices from 1 to 64");
    }
    config.device_count = static_cast<int>(count);
  }
  if (auto capacity = environment("TIDEPOOL_SIM_CAPACITY"); !capacity.empty()) {
    std::size_t bytes = 0;
    if (!parse_byte_count(capacity, &bytes) || bytes < config.granularity) {
      bad_variable("TIDEPOOL_SIM_CAPACITY", capacity,
                   "bytes per device, at least one 2 MiB page (e.g. 1073741824 or 1GiB)");
    }
    config.capacity = bytes;
  }
  // Processes started with one TIDEPOOL_SIM_UUID see the same simulated GPUs (one ledger); with
  // TIDEPOOL_SIM_SHARED=DIR they also share the GPUs' capacity through files in DIR.
  config.uuid_key = std::string(environment("TIDEPOOL_SIM_UUID"));
  if (auto shared = environment("TIDEPOOL_SIM_SHARED"); !shared.empty()) {
    if (shared.front() != '/') bad_variable("TIDEPOOL_SIM_SHARED", shared, "an absolute directory, e.g. /dev/shm");
    config.shared_capacity_directory = std::string(shared);
    if (config.uuid_key.empty()) config.uuid_key = "shared";
  }
  // TIDEPOOL_SIM_HOST_MEMORY=1: host memory behind the simulated GPU, so a program (or a test of
  // memory shared between processes) can write and read the bytes it allocates from the host.
  if (auto host = environment("TIDEPOOL_SIM_HOST_MEMORY"); !host.empty()) {
    if (host != "0" && host != "1") bad_variable("TIDEPOOL_SIM_HOST_MEMORY", host, "0 or 1");
    config.back_with_host_memory = host == "1";
  }
  return config;
}

// TIDEPOOL_SIM_FAIL="CALL:N[:STATUS],...": the Nth call of kind CALL (a driver_call name, e.g.
// mem_create) fails with STATUS (a driver_status name, default "error"), as sim_driver::fail_nth.
void inject_failures_from_environment(sim_driver& sim) {
  const auto spec = environment("TIDEPOOL_SIM_FAIL");
  constexpr std::string_view expected = "CALL:N[:STATUS] items separated by commas, e.g. mem_create:2:out_of_memory";
  std::size_t from = 0;
  while (from < spec.size()) {
    const std::size_t comma = std::min(spec.find(',', from), spec.size());
    const std::string_view item = spec.substr(from, comma - from);
    from = comma + 1;
    const std::size_t colon = item.find(':');
    if (colon == std::string_view::npos) bad_variable("TIDEPOOL_SIM_FAIL", spec, expected);
    const std::string_view name = item.substr(0, colon);
    std::string_view rest = item.substr(colon + 1);
    std::string_view status_name = "error";
    if (const std::size_t second = rest.find(':'); second != std::string_view::npos) {
      status_name = rest.substr(second + 1);
      rest = rest.substr(0, second);
    }
    std::uint64_t nth = 0;
    if (!parse_count(rest, &nth) || nth == 0) bad_variable("TIDEPOOL_SIM_FAIL", spec, expected);
    std::size_t kind = 0;
    while (kind < driver_call_kinds && to_string(static_cast<driver_call>(kind)) != name) ++kind;
    if (kind == driver_call_kinds) bad_variable("TIDEPOOL_SIM_FAIL", spec, "CALL, a driver call such as mem_create");
    auto status = driver_status::success;
    for (auto s : {driver_status::out_of_memory, driver_status::invalid_value, driver_status::not_supported,
                   driver_status::not_ready, driver_status::error}) {
      if (to_string(s) == status_name) status = s;
    }
    if (status == driver_status::success) {
      bad_variable("TIDEPOOL_SIM_FAIL", spec, "STATUS, one of out_of_memory, invalid_value, not_supported, error");
    }
    sim.fail_nth(static_cast<driver_call>(kind), nth, status);
  }
}

}  // namespace

std::shared_ptr<driver> driver_from_environment() {
  const auto device = environment("TIDEPOOL_DEVICE");
  if (device == "sim") {
    auto sim = std::make_shared<sim_driver>(sim_config_from_environment());
    inject_failures_from_environment(*sim);
    return sim;
  }
  if (device == "cuda") return make_cuda_driver();
  if (!device.empty()) bad_variable("TIDEPOOL_DEVICE", device, "'sim' or 'cuda'");
  try {
    return make_cuda_driver();
  } catch (const error& e) {
    // Nobody asked for CUDA by name: say how to run without a GPU.
    if (e.code() != error_code::unavailable) throw;
    throw error(error_code::unavailable,
                fmt::format("{}; to run without a GPU, set TIDEPOOL_DEVICE=sim (the simulated GPU)", e.what()));
  }
}

}  // namespace detail

std::shared_ptr<driver> default_driver() {
  auto& state = detail::process();
  std::lock_guard lock(state.mutex);
  if (auto* table = state.table.load(std::memory_order_acquire)) return table->drv;
  if (!state.drv) state.drv = detail::driver_from_environment();
  return state.drv;
}

void set_default_driver(std::shared_ptr<driver> drv) {
  if (!drv) throw error(error_code::invalid_argument, "set_default_driver: the driver is null");
  auto& state = detail::process();
  std::lock_guard lock(state.mutex);
  if (auto* table = state.table.load(std::memory_order_acquire)) {
    throw error(error_code::invalid_argument,
                fmt::format("set_default_driver: pools already exist on the '{}' driver; the "
                            "driver can only be replaced before the first pool is made",
                            table->drv->name()));
  }
  state.drv = std::move(drv);
}

}  // namespace tidepool

// The options of GPU sharing (issue 14): from the environment (TIDEPOOL_SHARING,
// TIDEPOOL_SHARING_GIVES, TIDEPOOL_SHARING_WAIT_MS, TIDEPOOL_SHARING_PUBLISH_MS,
// TIDEPOOL_LEDGER_DIR) on first use, or set by the program at any time; and the state they live in.
#include <string_view>

#include <fmt/format.h>

#include "process/process_state.hpp"
#include "process/sharing.hpp"
#include "process/sharing_state.hpp"
#include "process/text_values.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/process.hpp"

namespace tidepool {
namespace detail {
namespace {

bool parse_switch(const char* name, std::string_view value, bool fallback) {
  if (value.empty()) return fallback;
  if (value == "1" || value == "on" || value == "true" || value == "yes") return true;
  if (value == "0" || value == "off" || value == "false" || value == "no") return false;
  throw error(error_code::invalid_argument, fmt::format("{}='{}' is not valid: expected 1 or 0", name, value));
}

std::uint64_t parse_ms(const char* name, std::string_view value, std::uint64_t fallback, std::uint64_t most) {
  if (value.empty()) return fallback;
  std::uint64_t number = 0;
  for (const char c : value) {
    if (c < '0' || c > '9' || number > most) {
      throw error(error_code::invalid_argument,
                  fmt::format("{}='{}' is not valid: expected milliseconds from 0 to {}", name, value, most));
    }
    number = number * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (number > most) {
    throw error(error_code::invalid_argument,
                fmt::format("{}='{}' is not valid: expected milliseconds from 0 to {}", name, value, most));
  }
  return number;
}

}  // namespace

std::atomic<sharing_state*> current_state{nullptr};

void read_options(sharing_state& s) {
  if (s.options_read) return;
  s.options_read = true;
  try {
    s.enabled = parse_switch("TIDEPOOL_SHARING", environment("TIDEPOOL_SHARING"), true);
    s.gives = parse_switch("TIDEPOOL_SHARING_GIVES", environment("TIDEPOOL_SHARING_GIVES"), true);
    s.wait_ms = parse_ms("TIDEPOOL_SHARING_WAIT_MS", environment("TIDEPOOL_SHARING_WAIT_MS"), default_wait_ms,
                         longest_wait_ms);
    s.publish_ms = parse_ms("TIDEPOOL_SHARING_PUBLISH_MS", environment("TIDEPOOL_SHARING_PUBLISH_MS"), 100, 10'000);
    if (s.publish_ms == 0) s.publish_ms = 1;
  } catch (const error& e) {
    s.options_error = e.what();
    s.enabled = false;
  }
  const auto dir = environment("TIDEPOOL_LEDGER_DIR");
  s.directory = dir.empty() ? std::string("/dev/shm") : std::string(dir);
}

sharing_state& sharing() {
  sharing_state* s = current_state.load(std::memory_order_acquire);
  if (s != nullptr) return *s;
  auto* fresh = new sharing_state();
  if (current_state.compare_exchange_strong(s, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *s;
}

std::shared_ptr<driver> process_driver() {
  auto* table = process().table.load(std::memory_order_acquire);
  return table == nullptr ? nullptr : table->drv;
}

std::string ledger_directory() {
  sharing_state& s = sharing();
  std::lock_guard guard(s.mutex);
  read_options(s);
  return s.directory;
}

}  // namespace detail

sharing_options get_sharing_options() {
  auto& s = detail::sharing();
  std::lock_guard guard(s.mutex);
  detail::read_options(s);
  if (!s.options_error.empty()) throw error(error_code::invalid_argument, s.options_error);
  sharing_options o;
  o.enabled = s.enabled.load();
  o.gives = s.gives.load();
  o.wait = std::chrono::milliseconds(s.wait_ms.load());
  return o;
}

void set_sharing_options(const sharing_options& options) {
  if (options.wait.count() < 0 || static_cast<std::uint64_t>(options.wait.count()) > detail::longest_wait_ms) {
    throw error(error_code::invalid_argument,
                fmt::format("sharing wait of {} ms: expected 0 to {} ms", options.wait.count(), detail::longest_wait_ms));
  }
  auto& s = detail::sharing();
  {
    std::lock_guard guard(s.mutex);
    detail::read_options(s);
    s.options_error.clear();
    s.enabled = options.enabled;
    s.gives = options.gives;
    s.wait_ms = static_cast<std::uint64_t>(options.wait.count());
  }
  if (!options.enabled) {
    (void)detail::stop_all();
    return;
  }
  // Turned on (or kept on): join the GPUs whose pools exist already.
  const auto pools = existing_pools();
  for (std::size_t d = 0; d < pools.size(); ++d) {
    if (pools[d] != nullptr) detail::sharing_join(static_cast<int>(d));
  }
}

}  // namespace tidepool

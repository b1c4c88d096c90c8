// tools/main.cpp: the `tidepool` command line: replay, info, view, generate-loader, top, trim; --version.
#include <cstdio>
#include <exception>
#include <new>
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "tidepool/errors.hpp"

#ifndef TIDEPOOL_VERSION_STRING
#error "TIDEPOOL_VERSION_STRING is defined by tools/CMakeLists.txt"
#endif

namespace {

// Prints "tidepool: <what>" once: the library's own messages already start with "tidepool: ".
void print_error(std::string_view what) {
  constexpr std::string_view prefix = "tidepool: ";
  if (what.substr(0, prefix.size()) == prefix) what.remove_prefix(prefix.size());
  fmt::print(stderr, "{}{}\n", prefix, what);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tidepool: a CUDA device-memory pool; replay allocation traces against it and today's allocators"};
  app.set_version_flag("--version", std::string("tidepool ") + TIDEPOOL_VERSION_STRING);
  app.require_subcommand(1);
  int exit_code = 0;
  tidepool::cli::add_replay_command(app, exit_code);
  tidepool::cli::add_info_command(app, exit_code);
  tidepool::cli::add_view_command(app, exit_code);
  tidepool::cli::add_generate_loader_command(app, exit_code);
  tidepool::cli::add_top_command(app, exit_code);
  tidepool::cli::add_trim_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tidepool::error& e) {
    print_error(e.what());
    return 2;
  } catch (const tidepool::out_of_memory& e) {
    print_error(e.what());  // the report: requested, in use, cached, driver free
    return 3;
  } catch (const std::bad_alloc& e) {
    print_error(fmt::format("host memory exhausted: {}", e.what()));
    return 3;
  } catch (const std::exception& e) {
    print_error(e.what());
    return 1;
  }
  return exit_code;
}

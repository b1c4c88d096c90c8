// tools/main.cpp: the `tidepool` command line: replay, info, generate-loader.
#include <cstdio>
#include <exception>
#include <new>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "tidepool/errors.hpp"

int main(int argc, char** argv) {
  CLI::App app{"tidepool: a CUDA device-memory pool; replay allocation traces against it and today's allocators"};
  app.require_subcommand(1);
  int exit_code = 0;
  tidepool::cli::add_replay_command(app, exit_code);
  tidepool::cli::add_info_command(app, exit_code);
  tidepool::cli::add_generate_loader_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tidepool::error& e) {
    fmt::print(stderr, "tidepool: {}\n", e.what());
    return 2;
  } catch (const std::bad_alloc& e) {
    fmt::print(stderr, "tidepool: out of memory: {}\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    fmt::print(stderr, "tidepool: {}\n", e.what());
    return 1;
  }
  return exit_code;
}

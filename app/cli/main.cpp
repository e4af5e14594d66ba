// SPDX-License-Identifier: MIT
// The `moewb` command line. Subcommands register themselves (commands/*.cpp); this file only wires
// them into CLI11 and turns errors into clear messages and exit codes.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "cli_progress.h"
#include "command_registry.h"
#include "moewb/demo_model.h"
#include "moewb/error.h"
#include "moewb/progress.h"

namespace moewb::cli {
namespace {
std::map<std::string, CommandSetup>& registry() {
  static std::map<std::string, CommandSetup> r;
  return r;
}
}  // namespace

CommandRegistrar::CommandRegistrar(std::string name, CommandSetup setup) {
  registry().emplace(std::move(name), std::move(setup));
}

}  // namespace moewb::cli

int main(int argc, char** argv) {
  using namespace moewb;
  CLI::App app{"MoE Workbench: inspect, analyse and compress Mixture-of-Experts checkpoints.\n"
               "MODEL may be a checkpoint directory, a model.safetensors.index.json or a .safetensors file;\n"
               "when omitted, the embedded demo model (tiny-mixtral) is used.",
               "moewb"};
  app.set_version_flag("--version", versionString());
  app.require_subcommand(1);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Log more detail to stderr");
  for (auto& [name, setup] : cli::registry()) setup(app);
  cli::installInterruptHandler();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const cli::CliExit& e) {
    return e.code;
  } catch (const Cancelled&) {
    std::fprintf(stderr, "moewb: cancelled; nothing was written\n");
    return 130;
  } catch (const Error& e) {
    std::fprintf(stderr, "moewb: error: %s\n", e.what());
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user gave that cannot be followed (a symbolic link loop, a permission): the user's to fix,
    // said with the path first, as every other error.
    std::fprintf(stderr, "moewb: error: %s: %s\n", e.path1().c_str(), e.code().message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moewb: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}

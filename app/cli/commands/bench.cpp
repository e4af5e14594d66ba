// SPDX-License-Identifier: MIT
// `moewb bench [GROUP] [--filter REGEX] [--json] [--min-time S] [--list]`: runs the Google Benchmark
// benchmarks compiled into this binary (bench/*.cpp). Benchmarks are named `<group>_<what>`, so a group
// selects by name prefix. `moewb bench gemm` and `moewb bench quantize` are subcommands instead: the GPU
// benchmarks, with their own options (bench_gpu.h).
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <array>
#include <string>
#include <vector>

#include "bench_gpu.h"
#include "command_registry.h"
#include "moewb/error.h"

namespace moewb::cli {
namespace {

// The groups users can name; each is the prefix of its benchmarks' names.
constexpr std::array<const char*, 4> kGroups = {"stats", "quant", "engine", "open"};

struct BenchArgs {
  std::string group;
  std::string filter;
  bool json = false;
  bool list = false;
  double min_time = 0;  // 0: Google Benchmark's default
  std::string device;   // "cuda": only the benchmarks that run on the GPU (names *_device, *_cuda)
};

std::string groupsText() {
  std::string out;
  for (const char* g : kGroups) out += (out.empty() ? "" : ", ") + std::string(g);
  return out;
}

// The regular expression handed to --benchmark_filter.
std::string benchmarkFilter(const BenchArgs& args) {
  std::string prefix;
  if (!args.group.empty()) {
    bool known = false;
    for (const char* g : kGroups) known = known || args.group == g;
    if (!known)
      throw Error(fmt::format("bench: unknown group '{}'; expected one of: {}", args.group, groupsText()));
    prefix = "^" + args.group + "_";
  }
  std::string filter = args.filter;
  if (args.device == "cuda") filter = filter.empty() ? "_device|_cuda" : "(" + filter + ").*(_device|_cuda)";
  if (filter.empty()) return prefix.empty() ? "." : prefix;
  if (prefix.empty()) return filter;
  // Inside a group the user's expression is searched in the rest of the name.
  return prefix + ".*(" + filter + ")";
}

void runBench(const BenchArgs& args) {
  std::vector<std::string> argv_text = {"moewb bench", "--benchmark_filter=" + benchmarkFilter(args)};
  if (args.json) argv_text.push_back("--benchmark_format=json");
  if (args.list) argv_text.push_back("--benchmark_list_tests=true");
  if (args.min_time > 0) argv_text.push_back(fmt::format("--benchmark_min_time={}", args.min_time));
  std::vector<char*> argv;
  for (auto& s : argv_text) argv.push_back(s.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(argv_text.size());
  benchmark::Initialize(&argc, argv.data());
  if (benchmark::ReportUnrecognizedArguments(argc, argv.data()))
    throw Error("bench: Google Benchmark did not accept the arguments built from the options");
  const std::size_t ran = benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (ran == 0 && !args.list)
    throw Error(fmt::format("bench: no benchmark matches '{}' (groups: {}; see `moewb bench --list`)",
                            benchmarkFilter(args), groupsText()));
}

const CommandRegistrar registrar("bench", [](CLI::App& root) {
  auto args = std::make_shared<BenchArgs>();
  auto* cmd = root.add_subcommand(
      "bench",
      "Run the built-in benchmarks: CPU groups (Google Benchmark), or `gemm` / `quantize` on the GPU");
  cmd->add_option("group", args->group,
                  "CPU benchmark group: " + groupsText() +
                      " (default: all); `gemm` and `quantize` are the GPU benchmarks (see `moewb bench "
                      "quantize --help`)");
  cmd->add_option("--filter", args->filter, "Regular expression on benchmark names (within the group)");
  cmd->add_flag("--json", args->json, "Google Benchmark JSON output");
  cmd->add_option("--min-time", args->min_time, "Minimum seconds per benchmark")->check(CLI::PositiveNumber);
  cmd->add_flag("--list", args->list, "List the matching benchmarks without running them");
  cmd->add_option("--device", args->device,
                  "cuda: only the benchmarks that run on the GPU (e.g. `moewb bench engine --device cuda`: the "
                  "GPU engine's eval and decode tokens/s); cpu: all (the default)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  addGpuBenchCommands(*cmd, "bench");
  // CLI11 runs this callback after a subcommand's too: the CPU groups only run when none was named.
  cmd->callback([args, cmd] {
    if (cmd->get_subcommands().empty()) runBench(*args);
  });
});

}  // namespace
}  // namespace moewb::cli

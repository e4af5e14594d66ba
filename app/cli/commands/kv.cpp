// SPDX-License-Identifier: MIT
// `moewb kv [MODEL] --prompt TEXT|--text FILE|--ids FILE --out FILE [--max-tokens N] [--first-tokens N]
// [--outlier-factor F] [--device auto|cpu|cuda] [--json]`: captures K (after RoPE), V and the attention of
// a prompt with per-channel statistics (outlier channels as core/include/moewb/engine/kv_stats.h defines
// them) and the attention mass on the first tokens, into a safetensors file the GUI reads
// (format in core/include/moewb/engine/kv_capture.h).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cli_progress.h"
#include "command_registry.h"
#include "engine_device.h"
#include "model_loading.h"
#include "moewb/demo_model.h"
#include "moewb/engine/engine.h"
#include "moewb/engine/kv_capture.h"
#include "moewb/engine/kv_stats.h"
#include "moewb/jobs/kv_job.h"

namespace moewb::cli {
namespace {

struct KvArgs {
  std::string model, prompt, text, ids, out;
  int max_tokens = 512, first_tokens = 4;
  double outlier_factor = engine::kDefaultOutlierFactor;
  bool json = false, no_bos = false, force = false;
  EngineDeviceArgs device;
};

void runKv(const KvArgs& args) {
  // The request the GUI's K/V view builds too (core/include/moewb/jobs/kv_job.h).
  jobs::KvRequest request;
  request.model = resolveModelPath(args.model);
  request.prompt = args.prompt;
  request.text = args.text;
  request.ids = args.ids;
  request.no_bos = args.no_bos;
  request.max_tokens = args.max_tokens;
  request.first_tokens = args.first_tokens;
  request.outlier_factor = args.outlier_factor;
  request.out = args.out;
  request.replace_existing = args.force;
  EngineDevice device;
  request.on_engine = [&](engine::MoeEngine& engine) { device = useEngineDevice(engine, args.device, "kv"); };
  const jobs::KvJobResult run = jobs::runKvJob(request, makeCliProgress("kv capture"));
  const engine::KvCapture& capture = *run.capture;
  const std::vector<double>& sink = run.sink_mass;
  const std::vector<engine::KvLayerChannels>& channels = run.channels;
  if (args.json) {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& c : channels)
      layers.push_back({{"layer", c.layer},
                        {"sink_mass", sink[static_cast<std::size_t>(c.layer)]},
                        {"key_outlier_channels", c.key_outliers.channels},
                        {"key_outlier_threshold", c.key_outliers.threshold},
                        {"value_outlier_channels", c.value_outliers.channels},
                        {"value_outlier_threshold", c.value_outliers.threshold},
                        {"peak_key_channel", c.peak_key_channel},
                        {"peak_key_over_mean_rms", c.peak_key_over_rms}});
    nlohmann::json j = {{"out", args.out},
                        {"model", run.model},
                        {"tokens", capture.length},
                        {"layers", capture.layers},
                        {"heads", capture.heads},
                        {"kv_heads", capture.kv_heads},
                        {"first_tokens", capture.first_tokens},
                        {"sink_mass_per_layer", sink},
                        {"outlier_factor", args.outlier_factor},
                        {"channels", layers}};
    j.update(device.toJson());
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("{} tokens, {} layers x {} heads ({} KV heads), on {} -> {}\n", capture.length, capture.layers,
             capture.heads, capture.kv_heads, device.summary(), args.out);
  fmt::print("outlier channel: max |x| > {} x the median channel's (all KV heads of the layer)\n",
             args.outlier_factor);
  fmt::print("{:>6} {:>22} {:>26} {:>11} {:>11}\n", "layer",
             fmt::format("mass on first {}", capture.first_tokens), "largest K channel |max|/rms",
             "K outliers", "V outliers");
  for (const auto& c : channels)
    // The K channel whose peak stands out most from the typical channel: outliers MoQAE/KIVI care about.
    fmt::print("{:>6} {:>22.4f} {:>26} {:>11} {:>11}\n", c.layer, sink[static_cast<std::size_t>(c.layer)],
               fmt::format("ch {} at {:.1f}x mean rms", c.peak_key_channel, c.peak_key_over_rms),
               c.key_outliers.channels.size(), c.value_outliers.channels.size());
}

const CommandRegistrar registrar("kv", [](CLI::App& root) {
  auto args = std::make_shared<KvArgs>();
  auto* cmd = root.add_subcommand("kv", "Capture K/V cache and attention statistics of a prompt");
  addModelArgument(*cmd, args->model);
  auto* prompt = cmd->add_option("--prompt", args->prompt, "Prompt text");
  auto* text = cmd->add_option("--text", args->text, "Prompt from a text file");
  auto* ids = cmd->add_option("--ids", args->ids, "Pre-tokenized ids (text of integers or .npy)");
  prompt->excludes(text)->excludes(ids);
  text->excludes(ids);
  cmd->add_option("--out,-o", args->out, "Output file (safetensors with K, V, attention and statistics)")
      ->required();
  cmd->add_flag("--force", args->force, "Replace an existing --out file (never one the run reads)");
  cmd->add_option("--max-tokens", args->max_tokens, "Truncate the prompt to N tokens")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--first-tokens", args->first_tokens, "Keys counted as 'first tokens' (attention sinks)")
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--no-bos", args->no_bos, "Do not prepend the BOS token");
  cmd->add_option("--outlier-factor", args->outlier_factor,
                  "Outlier channel: max |x| above this many times the median channel's")
      ->check(CLI::Range(1.0, 1000.0));
  addEngineDeviceOptions(*cmd, args->device);
  cmd->add_flag("--json", args->json, "Print a JSON summary");
  cmd->callback([args] { runKv(*args); });
});

}  // namespace
}  // namespace moewb::cli

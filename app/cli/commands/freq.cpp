// SPDX-License-Identifier: MIT
// `moewb freq [MODEL] --text FILE [--seq-len 256] [--max-windows N] [--device auto|cpu|cuda] [--json|--csv]`:
// how often each expert of each MoE layer is among the top-k over a text (all positions of the evaluation
// windows).
#include <fmt/format.h>

#include "cli_progress.h"
#include "command_registry.h"
#include "engine_device.h"
#include "model_loading.h"
#include "moewb/demo_model.h"
#include "moewb/engine/engine.h"
#include "moewb/engine/expert_frequency.h"
#include "moewb/jobs/freq_job.h"

namespace moewb::cli {
namespace {

struct FreqArgs {
  std::string model, text, ids;
  int seq_len = 256, max_windows = 0;
  bool json = false, csv = false, no_bos = false;
  EngineDeviceArgs device;
};

void runFreq(const FreqArgs& args) {
  // The request the GUI's frequency view builds too (core/include/moewb/jobs/freq_job.h).
  jobs::FreqRequest request;
  request.model = resolveModelPath(args.model);
  request.text = args.text;
  request.ids = args.ids;
  request.no_bos = args.no_bos;
  request.seq_len = args.seq_len;
  request.max_windows = args.max_windows;
  EngineDevice device;
  request.on_engine = [&](engine::MoeEngine& engine) {
    device = useEngineDevice(engine, args.device, "freq");
  };
  const engine::ExpertFrequencyFile file = jobs::runFreqJob(request, makeCliProgress("routing"));
  const engine::ExpertFrequency& f = file.frequency;
  if (args.json) {
    // The file format of core's ExpertFrequencyFile (what the GUI and the rank policies read back).
    auto j = file.toJson();
    j.update(device.toJson());
    fmt::print("{}\n", j.dump(2));
  } else if (args.csv) {
    fmt::print("{}", f.toCsv());
  } else {
    fmt::print("{} tokens, top-{} of {} experts, on {}; share of tokens routed to each expert (%)\n",
               f.tokens, f.top_k, f.num_experts, device.summary());
    fmt::print("{:>6}", "layer");
    for (int e = 0; e < f.num_experts; ++e) fmt::print(" {:>6}", fmt::format("e{}", e));
    fmt::print("\n");
    for (const auto& l : f.layers) {
      fmt::print("{:>6}", l.layer);
      for (auto c : l.counts)
        fmt::print(" {:>6.2f}", 100.0 * static_cast<double>(c) / static_cast<double>(f.tokens));
      fmt::print("\n");
    }
  }
}

const CommandRegistrar registrar("freq", [](CLI::App& root) {
  auto args = std::make_shared<FreqArgs>();
  auto* cmd = root.add_subcommand("freq", "Expert activation frequency per MoE layer over a text");
  addModelArgument(*cmd, args->model);
  auto* text = cmd->add_option("--text", args->text, "Text file (tokenized as [bos] + encode(file))");
  auto* ids =
      cmd->add_option("--ids", args->ids, "Pre-tokenized ids (text of integers or .npy) instead of --text");
  text->excludes(ids);
  cmd->add_option("--seq-len", args->seq_len, "Window length in tokens")->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--max-windows", args->max_windows, "Only the first N windows (0: all)")
      ->check(CLI::Range(0, 1 << 30));  // not NonNegativeNumber: its message prints 1.8e308 in full
  cmd->add_flag("--no-bos", args->no_bos, "Do not prepend the BOS token");
  addEngineDeviceOptions(*cmd, args->device);
  auto* json = cmd->add_flag("--json", args->json, "Print {\"layers\":[{\"layer\",\"counts\":[...]}],...}");
  auto* csv = cmd->add_flag("--csv", args->csv, "Print layer,expert,count,fraction rows");
  json->excludes(csv);
  cmd->callback([args] { runFreq(*args); });
});

}  // namespace
}  // namespace moewb::cli

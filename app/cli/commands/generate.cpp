// SPDX-License-Identifier: MIT
// `moewb generate [MODEL] [--quantized DIR] (--prompt TEXT | --ids ID,ID,...) [--max-new-tokens N]
// [--greedy | --temperature T --top-p P --seed S] [--device auto|cpu|cuda] [--json]`: text generation with a
// KV cache (greedy by default), with the prefill and decode speeds and the memory it took.
#include <fmt/format.h>

#include <charconv>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_progress.h"
#include "command_registry.h"
#include "engine_device.h"
#include "model_loading.h"
#include "moewb/demo_model.h"
#include "moewb/engine/tokenizer.h"
#include "moewb/error.h"
#include "moewb/jobs/generate_job.h"

namespace moewb::cli {
namespace {

struct GenerateArgs {
  std::string model, quantized, prompt, ids;
  int max_new_tokens = 64, batch = 1;
  bool greedy = false, ignore_eos = false, no_bos = false, json = false;
  double temperature = 1.0, top_p = 1.0;
  uint64_t seed = 0;
  bool sampling = false;  // --temperature, --top-p or --seed given
  EngineDeviceArgs device;
};

// "1,5,9" (commas and/or spaces) or a file of ids (readTokenIdsFile: text of integers or .npy).
std::vector<int32_t> parseIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::size_t i = 0;
  bool list = true;
  while (i < text.size() && list) {
    while (i < text.size() && (text[i] == ',' || text[i] == ' ')) ++i;
    if (i == text.size()) break;
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
    const std::size_t next = static_cast<std::size_t>(end - text.data());
    if (ec != std::errc() || (next < text.size() && text[next] != ',' && text[next] != ' ')) {
      list = false;
      break;
    }
    if (v < INT32_MIN || v > INT32_MAX) throw Error(fmt::format("--ids: {} is not a token id", v));
    ids.push_back(static_cast<int32_t>(v));
    i = next;
  }
  if (list) {
    if (ids.empty()) throw Error("--ids is empty: expected token ids such as 1,415,2936");
    return ids;
  }
  if (std::filesystem::is_regular_file(text)) return engine::readTokenIdsFile(text);
  throw Error(
      fmt::format("--ids '{}': expected token ids separated by commas (1,415,2936) or a file of ids", text));
}

void runGenerate(const GenerateArgs& args) {
  // The request the GUI's "Try it" box builds too (core/include/moewb/jobs/generate_job.h).
  jobs::GenerateRequest request;
  request.model = resolveModelPath(args.model);
  if (!args.ids.empty())
    request.ids = parseIds(args.ids);
  else if (args.prompt.empty())
    throw Error("generate: the prompt is empty (give --prompt TEXT or --ids ID,ID,...)");
  request.prompt = args.prompt;
  request.no_bos = args.no_bos;
  request.quantized = args.quantized;
  request.batch = args.batch;
  request.options.max_new_tokens = args.max_new_tokens;
  request.options.greedy = args.greedy || !args.sampling;
  request.options.temperature = args.temperature;
  request.options.top_p = args.top_p;
  request.options.seed = args.seed;
  request.options.stop_at_eos = !args.ignore_eos;
  EngineDevice device;
  request.on_engine = [&](engine::MoeEngine& engine) {
    device = useEngineDevice(engine, args.device, "generate");
  };
  const jobs::GenerateJobResult run = jobs::runGenerateJob(request, makeCliProgress("generate"));

  const engine::GenerateResult& g = run.generation;
  if (args.json) {
    nlohmann::json j = run.toJson();
    j.update(device.toJson());
    fmt::print("{}\n", j.dump(2));
    return;
  }
  if (!run.tokenizer.empty()) {
    fmt::print("{}\n\n", g.text);
  } else {
    std::string ids;
    for (int32_t id : g.new_ids) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    fmt::print("{}\n(token ids: the model has no tokenizer)\n\n", ids);
  }
  const engine::GenerationTimings& t = g.timings;
  fmt::print("model {} ({}), {}, on {}{}\n", run.model, run.model_type, run.variant, device.summary(),
             run.batch > 1 ? fmt::format(", batch of {}", run.batch) : "");
  fmt::print("prompt {} tokens, {} new tokens (stopped by {}), {}\n", g.prompt_ids.size(), g.new_ids.size(),
             engine::stopReasonName(g.stopped_by),
             request.options.greedy
                 ? std::string("greedy")
                 : fmt::format("temperature {} top-p {} seed {}", args.temperature, args.top_p, args.seed));
  fmt::print("prefill {:>6} tokens in {:8.3f} s: {:10.1f} tokens/s\n", t.prefill_tokens, t.prefill_seconds,
             t.prefillTokensPerSecond());
  fmt::print("decode  {:>6} tokens in {:8.3f} s: {:10.1f} tokens/s\n", t.decode_tokens, t.decode_seconds,
             t.decodeTokensPerSecond());
  fmt::print("memory  KV cache peak {}, process peak RSS {}\n", humanBytes(double(t.peak_kv_cache_bytes)),
             humanBytes(double(run.peak_rss_bytes)));
}

const CommandRegistrar registrar("generate", [](CLI::App& root) {
  auto args = std::make_shared<GenerateArgs>();
  auto* cmd =
      root.add_subcommand("generate", "Generate text from a prompt with a KV cache (prefill/decode speed)");
  addModelArgument(*cmd, args->model);
  auto* prompt = cmd->add_option("--prompt", args->prompt, "Prompt text (tokenized as [bos] + encode(TEXT))");
  auto* ids =
      cmd->add_option("--ids", args->ids, "Prompt token ids, used as given: ID,ID,... or a file of ids");
  prompt->excludes(ids);
  cmd->add_option("--quantized", args->quantized,
                  "A compressed export (manifest.json) or dequantized checkpoint whose matrices replace the "
                  "original's");
  cmd->add_option("--max-new-tokens", args->max_new_tokens, "Tokens to generate at most (default 64)");
  auto* greedy =
      cmd->add_flag("--greedy", args->greedy, "Take the most likely token every step (the default)");
  auto sampling = [args](auto) { args->sampling = true; };
  auto* temperature = cmd->add_option("--temperature", args->temperature,
                                      "Sample: divide the logits by T (> 0) before the softmax (default 1)")
                          ->each(sampling);
  auto* top_p =
      cmd->add_option("--top-p", args->top_p,
                      "Sample from the most likely tokens holding probability P, in (0, 1] (default 1)")
          ->each(sampling);
  auto* seed = cmd->add_option("--seed", args->seed, "Seed of the sampler (std::mt19937_64; default 0)")
                   ->each(sampling);
  greedy->excludes(temperature)->excludes(top_p)->excludes(seed);
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Do not stop at the model's end-of-sequence token");
  cmd->add_flag("--no-bos", args->no_bos, "Do not prepend the BOS token to --prompt");
  cmd->add_option(
      "--batch", args->batch,
      "Decode N copies of the prompt together (batched decode throughput; the text is the first's)");
  addEngineDeviceOptions(*cmd, args->device);
  cmd->add_flag(
      "--json", args->json,
      "Print JSON {\"new_ids\",\"text\",\"prefill_tokens_per_second\",\"decode_tokens_per_second\",...}");
  cmd->callback([args] { runGenerate(*args); });
});

}  // namespace
}  // namespace moewb::cli

// SPDX-License-Identifier: MIT
// `moewb eval [MODEL] [--quantized DIR]... [--quantize SPEC]... --text FILE [--seq-len 256] [--max-windows N]
// [--device auto|cpu|cuda] [--json]`: perplexity with the reference protocol (non-overlapping windows,
// [bos] + encode(text)), for the original weights and every compressed variant, with a comparison table.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli_progress.h"
#include "command_registry.h"
#include "engine_device.h"
#include "model_loading.h"
#include "moewb/demo_model.h"
#include "moewb/engine/engine.h"
#include "moewb/engine/kv_cache.h"
#include "moewb/error.h"
#include "moewb/jobs/eval_job.h"

namespace moewb::cli {
namespace {

struct EvalArgs {
  std::string model, text, ids, save_ids, frequencies;
  std::vector<std::string> quantized, quantize;
  std::vector<std::string> kv;  // KV-cache formats, each a row on the original weights
  int64_t kv_context = 0;       // 0: max_position_embeddings, else 32768
  int seq_len = 256, max_windows = 0;
  int64_t batch_tokens = 8192;
  bool json = false, no_bos = false, skip_original = false, force = false;
  EngineDeviceArgs device;
};

// One row per --kv format: the original weights with the KV cache stored in that format (same request
// otherwise), with its cache's average stored bits and bytes (moewb/engine/kv_cache.h).
nlohmann::json evalKvFormats(const EvalArgs& args, const jobs::EvalRequest& base, EngineDevice& device) {
  std::vector<std::shared_ptr<const engine::KvCachePolicy>> policies;
  for (const auto& spec : args.kv)  // every spec checked before anything runs (moqae:PATH reads its router)
    policies.push_back(engine::makeKvCachePolicy(spec));
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& policy : policies) {
    jobs::EvalRequest request = base;
    request.original = true;
    request.export_folders.clear();
    request.quick_specs.clear();
    request.save_ids.clear();
    engine::ModelConfig config;
    int64_t context = args.kv_context;
    request.on_engine = [&](engine::MoeEngine& engine) {
      device = useEngineDevice(engine, args.device, "eval");
      engine.setKvCachePolicy(policy);
      config = engine.config();
      if (context <= 0) context = engine::defaultKvContext(engine.checkpoint());
    };
    const jobs::EvalJobResult run =
        jobs::runEvalJob(request, makeCliProgress("eval --kv " + policy->label()));
    const engine::PerplexityResult& r = run.variants.front().perplexity;
    nlohmann::json j = r.toJson();
    j["variant"] = "kv " + policy->label();
    j["replaced_matrices"] = 0;
    j["weight_bytes"] = run.variants.front().weight_bytes;
    j.update(engine::kvCacheReport(config, *policy, {r.stats.kv_stored_bits, r.stats.kv_elements},
                                   args.seq_len, context));
    rows.push_back(j);
  }
  return rows;
}

// Every variant after the first against the first (the original when it was evaluated), window by window:
// "vs_first" = {"delta_nll","delta_nll_stderr","windows","significant"} (engine::pairedNllDifference).
void addPairedComparisons(nlohmann::json& results) {
  if (results.size() < 2) return;
  auto windows = [](const nlohmann::json& j) {
    engine::PerplexityResult r;
    r.window_nll = j.at("window_nll").get<std::vector<double>>();
    return r;
  };
  const engine::PerplexityResult first = windows(results.front());
  for (std::size_t i = 1; i < results.size(); ++i)
    results[i]["vs_first"] = engine::pairedNllDifference(windows(results[i]), first).toJson();
}

// A NaN or infinite perplexity is a failure, not a number to compare: said after the results (which show the
// variants it hit), with exit code 1 instead of 0.
void checkFinitePerplexities(const nlohmann::json& results) {
  std::string hit;
  for (const auto& j : results)
    if (!std::isfinite(j["ppl"].get<double>())) hit += (hit.empty() ? "" : ", ") + j["variant"].get<std::string>();
  if (!hit.empty())
    throw Error(fmt::format("eval: the perplexity of {} is not a number (NaN/Inf weights or activations; "
                            "`moewb stats` names the tensors that hold NaN/Inf)",
                            hit));
}

// Windows longer than the positions the model was trained for run, but their perplexity says little.
void warnAboveMaxPositions(const engine::MoeEngine& engine, int seq_len) {
  const nlohmann::json& config = engine.checkpoint().config();
  if (!config.contains("max_position_embeddings") || !config["max_position_embeddings"].is_number_integer()) return;
  const int64_t max_positions = config["max_position_embeddings"].get<int64_t>();
  if (max_positions > 0 && seq_len > max_positions)
    std::fprintf(stderr,
                 "moewb: warning: --seq-len %d is above the model's max_position_embeddings %lld (config.json): "
                 "positions past it were not trained\n",
                 seq_len, static_cast<long long>(max_positions));
}

void runEval(const EvalArgs& args) {
  for (const auto& spec : args.kv) engine::makeKvCachePolicy(spec);  // a typo fails before any evaluation
  // The request the GUI's perplexity view builds too (core/include/moewb/jobs/eval_job.h).
  jobs::EvalRequest request;
  request.model = resolveModelPath(args.model);
  request.text = args.text;
  request.ids = args.ids;
  request.no_bos = args.no_bos;
  request.save_ids = args.save_ids;
  request.replace_existing = args.force;
  request.options.seq_len = args.seq_len;
  request.options.max_windows = args.max_windows;
  request.options.batch_tokens = args.batch_tokens;
  request.original = !args.skip_original;
  request.export_folders = args.quantized;
  request.quick_specs = args.quantize;
  if (!args.frequencies.empty()) request.frequencies = quant::ExpertFrequencies::load(args.frequencies);
  EngineDevice device;
  request.on_engine = [&](engine::MoeEngine& engine) {
    warnAboveMaxPositions(engine, args.seq_len);
    device = useEngineDevice(engine, args.device, "eval");
  };
  const jobs::EvalJobResult run = jobs::runEvalJob(request, makeCliProgress("eval"));

  nlohmann::json results = nlohmann::json::array();
  for (const auto& v : run.variants) {
    nlohmann::json j = v.perplexity.toJson();
    j["variant"] = v.label;
    j["replaced_matrices"] = v.replaced_matrices;
    j["weight_bytes"] = v.weight_bytes;
    results.push_back(j);
  }
  for (auto& j : evalKvFormats(args, request, device)) results.push_back(std::move(j));
  addPairedComparisons(results);
  if (args.json) {
    nlohmann::json out = results.front();
    out["model"] = run.model;
    out["seq_len"] = args.seq_len;
    out.update(device.toJson());
    if (results.size() > 1) out["variants"] = results;
    fmt::print("{}\n", out.dump(2));
    checkFinitePerplexities(results);
    return;
  }
  fmt::print("model {} ({}), seq-len {}, {} windows, {} tokens scored, on {}\n", run.model, run.model_type,
             args.seq_len, results.front()["windows"].get<int>(), results.front()["tokens"].get<int64_t>(),
             device.summary());
  const double base = results.front()["ppl"].get<double>();
  const bool kv = !args.kv.empty();
  fmt::print("{:<28} {:>19} {:>9} {:>22} {:>12} {:>10}{}\n", "variant", "ppl ± s.e.", "vs first",
             "ΔNLL vs first ± s.e.", "weights MB", "tokens/s",
             kv ? fmt::format(" {:>8} {:>10} {:>14}", "KV bits", "KV MB", "KV MB @ context") : "");
  for (const auto& j : results) {
    std::string kv_columns;
    if (j.contains("kv_avg_bits"))
      kv_columns = fmt::format(" {:>8.3f} {:>10.3f} {:>14.1f}", j["kv_avg_bits"].get<double>(),
                               j["kv_bytes"].get<uint64_t>() / 1e6, j["kv_bytes_at_context"].get<uint64_t>() / 1e6);
    else if (kv)
      kv_columns = fmt::format(" {:>8} {:>10} {:>14}", "32", "-", "-");
    // The paired difference says whether the change is more than the windows' noise (2 s.e.).
    std::string paired = "-";
    if (j.contains("vs_first")) {
      const auto& d = j["vs_first"];
      paired = fmt::format("{:+.4f} ± {:.4f} {}", d["delta_nll"].get<double>(), d["delta_nll_stderr"].get<double>(),
                           d["significant"].get<bool>() ? "*" : "≈");
    }
    fmt::print("{:<28} {:>10.4f} ± {:>6.4f} {:>+8.2f}% {:>22} {:>12.2f} {:>10.0f}{}\n", j["variant"].get<std::string>(),
               j["ppl"].get<double>(), j["ppl_stderr"].get<double>(), 100.0 * (j["ppl"].get<double>() / base - 1.0),
               paired, j["weight_bytes"].get<uint64_t>() / 1e6, j["tokens_per_second"].get<double>(), kv_columns);
  }
  if (results.size() > 1)
    fmt::print("ΔNLL: mean over the {} windows of (variant - first) NLL per token; * more than 2 standard errors "
               "from 0, ≈ within the noise of this many windows\n",
               results.front()["windows"].get<int>());
  if (kv)
    fmt::print("KV MB: one sequence of --seq-len tokens, K and V of every layer; @ context: {} tokens\n",
               results.back()["kv_context"].get<int64_t>());
  checkFinitePerplexities(results);
}

const CommandRegistrar registrar("eval", [](CLI::App& root) {
  auto args = std::make_shared<EvalArgs>();
  auto* cmd = root.add_subcommand("eval", "Perplexity of the model and its compressed variants on a text");
  addModelArgument(*cmd, args->model);
  auto* text =
      cmd->add_option("--text", args->text, "Text file to evaluate (tokenized as [bos] + encode(file))");
  auto* ids =
      cmd->add_option("--ids", args->ids, "Pre-tokenized ids (text of integers or .npy) instead of --text");
  text->excludes(ids);
  cmd->add_option("--quantized", args->quantized,
                  "A compressed export (manifest.json) or dequantized checkpoint whose matrices replace the "
                  "original's; repeatable");
  cmd->add_option("--quantize", args->quantize,
                  "Quantize in memory and evaluate: rtn:3, hqq:3, milo:3:POLICY (e.g. dense-64, uniform-16, "
                  "dense-64+kurtosis-16); repeatable");
  cmd->add_option("--kv", args->kv,
                  "Evaluate the original weights with the KV cache in a format: fp16, int8, int4, int2, "
                  "int4-g32, kivi-2, kivi-4, int4:group=64:chunk=32, moqae:ROUTER.json (docs/kv-cache.md); repeatable");
  cmd->add_option("--kv-context", args->kv_context,
                  "Context length the KV bytes are also reported at (default: max_position_embeddings, else "
                  "32768)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--frequencies", args->frequencies,
                  "Expert frequencies (`moewb freq --json` output) for frequency-R rank policies");
  cmd->add_option("--seq-len", args->seq_len, "Window length in tokens")->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--max-windows", args->max_windows, "Evaluate only the first N windows (0: all)")
      ->check(CLI::Range(0, 1 << 30));  // not NonNegativeNumber: its message prints 1.8e308 in full
  cmd->add_option("--batch-tokens", args->batch_tokens, "Tokens per forward pass (activation buffer size)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--save-ids", args->save_ids, "Also write the evaluated token ids to FILE (one per line)");
  cmd->add_flag("--force", args->force, "Replace an existing --save-ids file (never one the run reads)");
  cmd->add_flag("--no-bos", args->no_bos, "Do not prepend the BOS token");
  cmd->add_flag("--no-original", args->skip_original, "Evaluate only the variants");
  addEngineDeviceOptions(*cmd, args->device);
  cmd->add_flag("--json", args->json,
                "Print JSON ({\"ppl\",\"tokens\",\"device\",...}, \"variants\" when several)");
  cmd->callback([args] { runEval(*args); });
});

}  // namespace
}  // namespace moewb::cli

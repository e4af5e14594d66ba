// SPDX-License-Identifier: MIT
// `moewb moqae train MODEL --text CALIB --lambda L ... --out ROUTER.json [--json]` and
// `moewb moqae sweep MODEL --text CALIB --eval-text TEST [--lambdas ...] --out DIR [--json]`: MoQAE's routers
// (core/include/moewb/jobs/moqae_job.h, docs/kv-cache.md#moqae). Both run on the CPU engine.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_progress.h"
#include "command_registry.h"
#include "model_loading.h"
#include "moewb/demo_model.h"
#include "moewb/error.h"
#include "moewb/jobs/moqae_job.h"

namespace moewb::cli {
namespace {

namespace mq = methods::moqae;

struct MoqaeArgs {
  std::string model, text, out, configs = "fp16,int8,int4,int2", loss = "text";
  double lambda = 0.5;
  int chunk = 32, share = 3, steps = 1500, seq_len = 256, windows = 12, batch = 8;
  uint64_t seed = 0;
  bool no_freeze = false, json = false, force = false;
  // sweep
  std::string eval_text, lambdas = "0.1,0.3,0.5,0.7,0.9";
  int eval_seq_len = 256, max_windows = 0;
  int64_t context = 0;
};

jobs::MoqaeTrainRequest trainRequest(const MoqaeArgs& a) {
  jobs::MoqaeTrainRequest r;
  r.model = resolveModelPath(a.model);
  r.text = a.text;
  r.configs = a.configs;
  r.chunk_tokens = a.chunk;
  r.share = a.share;
  r.freeze = !a.no_freeze;
  r.table.seq_len = a.seq_len;
  r.table.windows = a.windows;
  r.training.lambda = a.lambda;
  r.training.loss = mq::parseLossReading(a.loss, "moqae: --loss");
  r.training.steps = a.steps;
  r.training.batch = a.batch;
  r.training.seed = a.seed;
  r.out = a.out;
  r.replace_existing = a.force;
  return r;
}

std::vector<double> parseLambdas(const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || item.empty() || !(v >= 0 && v <= 1))
      throw Error(fmt::format("moqae sweep: --lambdas '{}': '{}' is not a number in 0..1", text, item));
    out.push_back(v);
  }
  if (out.empty()) throw Error("moqae sweep: --lambdas is empty (expected e.g. 0.1,0.3,0.5)");
  return out;
}

std::string sharesText(const nlohmann::json& shares) {
  std::string out;
  for (const auto& [name, share] : shares.items())
    out += fmt::format("{}{} {:.0f}%", out.empty() ? "" : ", ", name, 100.0 * share.get<double>());
  return out;
}

void runTrain(const MoqaeArgs& a) {
  const jobs::MoqaeTrainResult run = jobs::runMoqaeTrainJob(trainRequest(a), makeCliProgress("moqae train"));
  const nlohmann::json& t = run.routers.training;
  if (a.json) {
    nlohmann::json j = mq::routerSetToJson(run.routers);
    j.erase("routers");  // the weights are in --out
    j["out"] = a.out;
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("cost table: {} windows of {} tokens in {:.1f} s; training: {} steps in {:.2f} s\n",
             t["calibration"]["windows"].get<int>(), a.seq_len, run.table_seconds, a.steps, run.training.seconds);
  fmt::print("loss ({}, λ={}): {:.5f} -> {:.5f}\n", a.loss, a.lambda, t["loss_first"].get<double>(),
             t["loss_last"].get<double>());
  for (const char* key : {"calibration_before", "calibration_after"})
    fmt::print("{:<8} calibration estimate: {:.3f} bits, ΔNLL {:+.4f}; {}\n",
               std::string(key) == "calibration_before" ? "before" : "after", t[key]["avg_bits"].get<double>(),
               t[key]["delta_nll"].get<double>(), sharesText(t[key]["shares"]));
  if (!a.out.empty()) fmt::print("router -> {} (use: moewb eval --kv moqae:{})\n", a.out, a.out);
}

void runSweep(const MoqaeArgs& a) {
  jobs::MoqaeSweepRequest r;
  r.train = trainRequest(a);
  r.train.out.clear();
  r.lambdas = parseLambdas(a.lambdas);
  r.eval_text = a.eval_text;
  r.eval.seq_len = a.eval_seq_len;
  r.eval.max_windows = a.max_windows;
  r.context = a.context;
  r.out_dir = a.out;
  r.replace_existing = a.force;
  const jobs::MoqaeSweepResult run = jobs::runMoqaeSweepJob(r, makeCliProgress("moqae sweep"));
  if (a.json) {
    fmt::print("{}\n", run.toJson().dump(2));
    return;
  }
  fmt::print("model {}, eval windows of {} tokens, chunk {}, share {}, freeze {}, loss {}; configs {}\n", run.model,
             a.eval_seq_len, a.chunk, a.share, a.no_freeze ? "off" : "on", a.loss, a.configs);
  const double base = run.rows.front().ppl;
  fmt::print("{:<16} {:>9} {:>9} {:>8} {:>10} {:>16}  {}\n", "variant", "ppl", "vs first", "KV bits", "KV KB",
             fmt::format("KV MB @ {}", run.context), "routed chunks (eval text)");
  for (const auto& row : run.rows) {
    std::string mix;
    if (!std::isnan(row.lambda)) {
      std::vector<int64_t> per_config(run.configs.size(), 0);
      for (const auto& layer : row.chunks_per_config)
        for (std::size_t j = 0; j < layer.size(); ++j) per_config[j] += layer[j];
      int64_t all = 0;
      for (int64_t n : per_config) all += n;
      for (std::size_t j = 0; j < per_config.size(); ++j)
        mix += fmt::format("{}{} {:.0f}%", j ? ", " : "", run.configs[j], all ? 100.0 * per_config[j] / all : 0.0);
    }
    fmt::print("{:<16} {:>9.4f} {:>+8.2f}% {:>8.3f} {:>10.1f} {:>16.2f}  {}\n", row.variant, row.ppl,
               100.0 * (row.ppl / base - 1.0), row.avg_bits, row.kv_bytes / 1e3, row.kv_bytes_at_context / 1e6, mix);
  }
  fmt::print("KV KB: one sequence of {} tokens, K and V of every layer; cost table {:.0f} s, training {:.1f} s, "
             "evaluation {:.0f} s; routers and sweep.json in {}\n",
             a.eval_seq_len, run.table_seconds, run.train_seconds, run.eval_seconds, a.out);
}

void addTrainingOptions(CLI::App& cmd, MoqaeArgs& a) {
  addModelArgument(cmd, a.model);
  cmd.add_option("--text", a.text, "Calibration text (tokenized as [bos] + encode(file))")->required();
  cmd.add_option("--chunk", a.chunk, "Tokens per chunk (N)")->check(CLI::Range(1, 1 << 16));
  cmd.add_option("--share", a.share, "Layers per routing group: the first routes, the others reuse (routing sharing)")
      ->check(CLI::Range(1, 1 << 12));
  cmd.add_flag("--no-freeze", a.no_freeze, "Route the first chunk too (default: it stays fp16, routing freezing)");
  cmd.add_option("--configs", a.configs, "Configurations the routers choose from (KV specs, e.g. fp16,int8,int4,int2)");
  cmd.add_option("--loss", a.loss, "Loss reading: text (paper's text, B/16 memory term), printed (Eq. 5 as printed: "
                                   "16/B), expected-bits (expectation over the router's distribution)")
      ->check(CLI::IsMember({"text", "printed", "expected-bits"}));
  cmd.add_option("--steps", a.steps, "AdamW steps")->check(CLI::Range(0, 1 << 20));
  cmd.add_option("--batch", a.batch, "Calibration windows per step")->check(CLI::Range(1, 1 << 12));
  cmd.add_option("--seq-len", a.seq_len, "Tokens per calibration window")->check(CLI::Range(2, 1 << 16));
  cmd.add_option("--windows", a.windows, "Calibration windows in the cost table (spread over the text)")
      ->check(CLI::Range(1, 1 << 16));
  cmd.add_option("--seed", a.seed, "Seed of the routers' initial weights and the batches");
  cmd.add_flag("--force", a.force, "Replace existing output files (never one the run reads)");
  cmd.add_flag("--json", a.json, "Print JSON");
}

const CommandRegistrar registrar("moqae", [](CLI::App& root) {
  auto* cmd = root.add_subcommand("moqae", "MoQAE: train routers that choose a KV-cache format per chunk");
  cmd->require_subcommand(1);
  auto train_args = std::make_shared<MoqaeArgs>();
  auto* train = cmd->add_subcommand("train", "Train MoQAE routers (LLM frozen) and write ROUTER.json");
  addTrainingOptions(*train, *train_args);
  train->add_option("--lambda", train_args->lambda, "λ: weight of the accuracy term (1 - λ: memory)")
      ->check(CLI::Range(0.0, 1.0));
  train->add_option("--out,-o", train_args->out, "ROUTER.json to write (moewb eval --kv moqae:ROUTER.json)")
      ->required();
  train->callback([train_args] { runTrain(*train_args); });

  auto sweep_args = std::make_shared<MoqaeArgs>();
  auto* sweep = cmd->add_subcommand("sweep", "Train one router per λ and compare with the uniform formats");
  addTrainingOptions(*sweep, *sweep_args);
  sweep->add_option("--eval-text", sweep_args->eval_text, "Text the perplexities are measured on")->required();
  sweep->add_option("--lambdas", sweep_args->lambdas, "λ values, comma-separated");
  sweep->add_option("--eval-seq-len", sweep_args->eval_seq_len, "Evaluation window length")
      ->check(CLI::Range(2, 1 << 20));
  sweep->add_option("--max-windows", sweep_args->max_windows, "Evaluate only the first N windows (0: all)")
      ->check(CLI::Range(0, 1 << 30));
  sweep->add_option("--kv-context", sweep_args->context, "Context length the KV bytes are also reported at")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  sweep->add_option("--out,-o", sweep_args->out, "Folder for router-lambda-L.json and sweep.json")->required();
  sweep->callback([sweep_args] { runSweep(*sweep_args); });
});

}  // namespace
}  // namespace moewb::cli

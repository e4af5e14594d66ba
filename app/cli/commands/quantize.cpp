// SPDX-License-Identifier: MIT
// `moewb quantize [MODEL] --method rtn|hqq|milo --bits N --group G [--policy P] [--budget SIZE]
//  [--out DIR] [--dequantized] [--json] [--device auto|cpu|cuda]`: quantizes every quantizable weight
// matrix (on the GPU, batched over same-shape matrices and streamed from the mapped checkpoint, when one
// is asked for and present), prints per-tensor error, rank and memory, which device ran and how long,
// and optionally exports the compressed (or dequantized bf16) checkpoint.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_progress.h"
#include "command_registry.h"
#include "model_loading.h"
#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/demo_model.h"
#include "moewb/error.h"
#include "moewb/quant/export.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/quant/rank_policy.h"
#include "quant_device.h"

namespace moewb::cli {
namespace {

struct QuantizeArgs {
  std::string model;
  std::string method = "hqq";
  int bits = 3;
  int group = 64;
  std::string policy;
  std::string budget;
  std::string out;
  bool dequantized = false;
  bool json = false;
  std::string compensator = "int3";
  std::string svd = "exact";
  std::string frequencies;
  std::string only;
  std::string device = "cpu";
  int gpu_batch = 32;
  uint64_t seed = 0;
  int threads = 0;
  int max_iters = 20;
};

void runQuantize(const QuantizeArgs& a) {
  using namespace moewb::quant;
  const auto device = parseComputeDevice(a.device);
  if (!device) throw Error(fmt::format("quantize: --device '{}' is not auto, cpu or cuda", a.device));
  QuantizeSettings s;
  const auto method = parseMethod(a.method);
  if (!method) throw Error(fmt::format("quantize: --method '{}' is not rtn, hqq or milo", a.method));
  s.method = *method;
  s.grouped = {a.bits, a.group};
  validateSettings(s.grouped);
  const auto comp = parseCompensatorFormat(a.compensator);
  if (!comp)
    throw Error(fmt::format("quantize: --compensator '{}' is not int3, int8, fp16 or fp32", a.compensator));
  s.milo.compensator = *comp;
  if (a.svd != "exact" && a.svd != "randomized")
    throw Error(fmt::format("quantize: --svd '{}' is not exact or randomized", a.svd));
  s.milo.svd.method = a.svd == "exact" ? SvdMethod::Exact : SvdMethod::Randomized;
  s.milo.max_iters = a.max_iters;
  s.seed = a.seed;
  s.threads = a.threads;
  if (a.dequantized && a.out.empty()) throw Error("quantize: --dequantized needs --out DIR");
  if ((!a.policy.empty() || !a.budget.empty()) && s.method != Method::Milo)
    throw Error("quantize: --policy and --budget choose MiLo compensator ranks; use --method milo");
  if (!a.policy.empty() && !a.budget.empty())
    throw Error("quantize: give either --policy or --budget, not both");

  const std::string path = resolveModelPath(a.model);
  auto catalog = std::make_shared<ModelCatalog>(Checkpoint::open(path));
  std::vector<std::size_t> matrices = quantizableMatrices(*catalog);
  if (!a.only.empty()) {
    std::vector<std::size_t> kept;
    for (std::size_t i : matrices)
      if (globMatch(a.only, catalog->matrices()[i].name)) kept.push_back(i);
    if (kept.empty()) throw Error(fmt::format("quantize: no quantizable matrix matches --only '{}'", a.only));
    matrices = std::move(kept);
  }
  if (matrices.empty()) throw Error(fmt::format("{}: no quantizable weight matrix found", path));

  std::vector<int> ranks(matrices.size(), 0);
  std::string policy_text;
  if (s.method == Method::Milo) {
    RankPolicy policy;
    if (!a.budget.empty()) {
      const auto facts = matrixFacts(*catalog, matrices, false);
      policy = policyForBudget(parseByteSize(a.budget), fixedBytes(*catalog, matrices, s.grouped), facts,
                               s.milo.compensator, s.milo.compensator_group);
      std::fprintf(stderr, "moewb: budget %s -> policy %s\n", a.budget.c_str(), policy.text().c_str());
    } else {
      policy = RankPolicy::parse(a.policy.empty() ? "uniform-16" : a.policy);
    }
    const auto facts = matrixFacts(*catalog, matrices, policy.needsKurtosis());
    std::unique_ptr<ExpertFrequencies> freq;
    if (!a.frequencies.empty())
      freq = std::make_unique<ExpertFrequencies>(ExpertFrequencies::load(a.frequencies));
    ranks = assignRanks(policy, facts, freq.get());
    policy_text = policy.text();
  }

  // Chosen after every option was checked, so a bad option never waits for the GPU to start.
  const std::unique_ptr<BatchBackend> backend = quantBackendFor(*device, "quantize");
  PipelineOptions pipeline;
  pipeline.backend = backend.get();
  pipeline.max_batch = a.gpu_batch;
  ModelQuantization result =
      quantizeModel(*catalog, s, matrices, ranks, makeCliProgress("quantize"), {}, {}, pipeline);
  result.policy = policy_text;
  for (const auto& line : result.fallbacks) std::fprintf(stderr, "moewb: %s\n", line.c_str());

  if (!a.out.empty()) {
    if (a.dequantized)
      writeDequantizedModel(*catalog, result, a.out, makeCliProgress("writing"));
    else
      writeCompressedModel(*catalog, result, a.out, {}, makeCliProgress("writing"));
  }

  int64_t comp_bytes = 0, quant_bytes = 0, orig_bytes = 0;
  double err_sum = 0;
  for (const auto& q : result.matrices) {
    comp_bytes += q.compensator_bytes;
    quant_bytes += q.bytes;
    orig_bytes += q.original_bytes;
    err_sum += q.rel_error;
  }
  const double mean_err = err_sum / double(result.matrices.size());
  if (a.json) {
    nlohmann::json j = {
        {"model", path},
        {"method", methodName(s.method)},
        {"bits", s.grouped.bits},
        {"group", s.grouped.group},
        {"policy", policy_text},
        {"compensator",
         s.method == Method::Milo ? std::string(compensatorFormatName(s.milo.compensator)) : ""},
        {"seconds", result.seconds},
        {"device", result.device},
        {"device_matrices", result.backend_matrices},
        {"cpu_fallbacks", result.fallbacks},
        {"timings",
         {{"read", result.timings.read},
          {"upload", result.timings.upload},
          {"quantize", result.timings.compute},
          {"download", result.timings.download},
          {"store", result.timings.store},
          {"device_total", result.timings.backendSeconds()},
          {"batches", result.timings.batches}}},
        {"original_bytes", result.original_bytes},
        {"compressed_bytes", result.compressed_bytes},
        {"quantized_original_bytes", orig_bytes},
        {"quantized_bytes", quant_bytes},
        {"compensator_bytes", comp_bytes},
        {"mean_rel_error", mean_err},
        {"out", a.out},
        {"tensors", nlohmann::json::object()}};
    for (const auto& q : result.matrices)
      j["tensors"][q.source.name] = {{"rel_error", q.rel_error},
                                     {"rank", q.rank},
                                     {"bits", q.base.bits},
                                     {"bytes", q.bytes},
                                     {"compensator_bytes", q.compensator_bytes},
                                     {"original_bytes", q.original_bytes},
                                     {"kurtosis", q.kurtosis},
                                     {"iterations", q.curve.size()}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%-64s %5s %10s %12s %12s\n", "tensor", "rank", "rel_error", "bytes", "comp_bytes");
  for (const auto& q : result.matrices)
    std::printf("%-64s %5d %10.6f %12lld %12lld\n", q.source.name.c_str(), q.rank, q.rel_error,
                static_cast<long long>(q.bytes), static_cast<long long>(q.compensator_bytes));
  std::printf("\n%s %d-bit g%d%s%s: %zu matrices, mean rel. error %.6f, %.1f s on %s\n",
              methodName(s.method).data(), s.grouped.bits, s.grouped.group,
              policy_text.empty() ? "" : ", policy ", policy_text.c_str(), result.matrices.size(), mean_err,
              result.seconds, result.device.c_str());
  if (result.backend_matrices > 0)
    std::printf(
        "%s: %zu matrices in %d batches, %.2f s (upload %.2f, quantize %.2f, download %.2f); "
        "reading %.2f s, storing %.2f s on the CPU alongside\n",
        result.device.c_str(), result.backend_matrices, result.timings.batches,
        result.timings.backendSeconds(), result.timings.upload, result.timings.compute,
        result.timings.download, result.timings.read, result.timings.store);
  std::printf("quantized matrices: %.2f MB -> %.2f MB (compensators %.2f MB)\n", orig_bytes / 1e6,
              quant_bytes / 1e6, comp_bytes / 1e6);
  std::printf("whole model: %.2f MB -> %.2f MB (%.1f%%)\n", result.original_bytes / 1e6,
              result.compressed_bytes / 1e6,
              100.0 * double(result.compressed_bytes) / double(result.original_bytes));
  if (!a.out.empty())
    std::printf("wrote %s checkpoint to %s\n", a.dequantized ? "dequantized bf16" : "compressed",
                a.out.c_str());
}

const CommandRegistrar registrar("quantize", [](CLI::App& root) {
  auto a = std::make_shared<QuantizeArgs>();
  auto* cmd = root.add_subcommand("quantize", "Quantize the weight matrices (RTN, HQQ or MiLo) and export");
  addModelArgument(*cmd, a->model);
  cmd->add_option("--method", a->method, "rtn, hqq or milo")->check(CLI::IsMember({"rtn", "hqq", "milo"}));
  cmd->add_option("--bits", a->bits, "Bits of the base weights: 2, 3, 4 or 8")
      ->check(CLI::IsMember({2, 3, 4, 8}));
  cmd->add_option("--group", a->group, "Group size along the input dimension")->check(CLI::Range(1, 65536));
  cmd->add_option("--policy", a->policy,
                  "MiLo rank policy, e.g. uniform-16, dense-512+kurtosis-16, 'sparse-8;*.q_proj.weight=64' "
                  "(default uniform-16)");
  cmd->add_option("--budget", a->budget, "MiLo: choose ranks so the model fits in SIZE (e.g. 200MB)");
  cmd->add_option("--out", a->out, "Export folder (compressed safetensors + manifest.json)");
  cmd->add_flag("--dequantized", a->dequantized, "Export a bf16 checkpoint in the original layout instead");
  cmd->add_flag("--json", a->json, "Print the report as JSON");
  cmd->add_option("--compensator", a->compensator, "MiLo compensator storage: int3, int8, fp16, fp32");
  cmd->add_option("--svd", a->svd, "MiLo truncated SVD: exact or randomized");
  cmd->add_option("--frequencies", a->frequencies, "Expert activation counts for frequency-R (JSON or CSV)");
  cmd->add_option("--only", a->only, "Quantize only matrices whose name matches this glob ('*' wildcard)");
  cmd->add_option("--max-iters", a->max_iters, "MiLo iterations at most")->check(CLI::Range(1, 1000));
  cmd->add_option("--seed", a->seed, "Seed of the randomized SVD");
  cmd->add_option("--threads", a->threads, "Worker threads (0: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option(
         "--device", a->device,
         "cpu, cuda or auto (the GPU when there is one). Without a usable GPU, cuda says so and runs "
         "on the CPU")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--gpu-batch", a->gpu_batch,
                  "Most matrices of one shape per GPU call (0: as many as GPU memory allows); fix it to "
                  "reproduce a GPU run exactly")
      ->check(CLI::Range(0, 4096));
  cmd->callback([a] { runQuantize(*a); });
});

}  // namespace
}  // namespace moewb::cli

// SPDX-License-Identifier: MIT
// `moewb quantize [MODEL] --method NAME [method options] [--policy P] [--budget SIZE]
//  [--out DIR [--force]] [--dequantized] [--json] [--device auto|cpu|cuda]`: quantizes every quantizable weight
// matrix (on the GPU, batched over same-shape matrices and streamed from the mapped checkpoint, when one
// is asked for and present), prints per-tensor error, rank and memory, which device ran and how long,
// and optionally exports the compressed (or dequantized bf16) checkpoint.
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_progress.h"
#include "command_registry.h"
#include "model_loading.h"
#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/demo_model.h"
#include "moewb/error.h"
#include "moewb/jobs/quantize_job.h"
#include "moewb/methods/registry.h"
#include "moewb/quant/export.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/quant/payload.h"
#include "moewb/quant/rank_policy.h"
#include "quant_device.h"
#include "engine_device_choice.h"

namespace moewb::cli {
namespace {

struct QuantizeArgs {
  std::string model;
  std::string method = "hqq";
  // Every registered method's options, by name, as given on the command line (flags made from the
  // registry); `given` holds the flags the user typed.
  std::map<std::string, std::string> option_text;
  std::map<std::string, CLI::Option*> option_flags;
  std::string policy;
  std::string budget;
  std::string out;
  bool dequantized = false;
  bool force = false;
  std::string nonfinite = "stop";
  bool json = false;
  std::string frequencies;
  std::string calib;  // calibration text for methods that need Hessians
  int64_t calib_tokens = 0;
  int calib_seq_len = 256;
  std::string only;
  std::string device = "cpu";
  int gpu_batch = 32;
  uint64_t seed = 0;
  int threads = 0;
};

// The chosen method's defaults with the options the user gave; an option of another method is an error.
quant::QuantizeSettings settingsFromFlags(const methods::WeightMethod& method, const QuantizeArgs& a) {
  quant::QuantizeSettings s = method.defaults();
  for (const auto& [name, flag] : a.option_flags) {
    if (flag->count() == 0) continue;
    const methods::OptionSpec* spec = method.option(name);
    if (!spec)
      throw Error(fmt::format("quantize: --{} is not an option of method {}", name, method.name()));
    methods::setOption(*spec, s, a.option_text.at(name), fmt::format("quantize: --{}", name));
  }
  method.validate(s);
  return s;
}

// Matrices the method could not treat its own way (QuantizedMatrix::fallback), one line per reason on
// stderr: "moewb: 3 of 96 matrices fell back to rtn: no calibration token reached this matrix (A, B, C)".
void printMethodFallbacks(const quant::ModelQuantization& result) {
  std::map<std::string, std::vector<std::string>> by_reason;
  for (const auto& q : result.matrices)
    if (!q.fallback.empty()) by_reason[q.fallback].push_back(q.source.name);
  for (const auto& [reason, names] : by_reason) {
    std::string listed;
    for (std::size_t i = 0; i < names.size() && i < 8; ++i) listed += (i ? ", " : "") + names[i];
    if (names.size() > 8) listed += fmt::format(", ... ({} more)", names.size() - 8);
    std::fprintf(stderr, "moewb: %zu of %zu matrices fell back to %s (%s)\n", names.size(),
                 result.matrices.size(), reason.c_str(), listed.c_str());
  }
}

void runQuantize(const QuantizeArgs& a) {
  using namespace moewb::quant;
  const auto device = parseComputeDevice(a.device);
  if (!device) throw Error(fmt::format("quantize: --device '{}' is not auto, cpu or cuda", a.device));
  const methods::WeightMethod& method = methods::weightMethod(a.method, "quantize: --method");
  jobs::QuantizeRequest request;
  request.settings = settingsFromFlags(method, a);
  request.settings.seed = a.seed;
  request.settings.threads = a.threads;
  request.only = a.only;
  request.policy = a.policy;
  request.budget = a.budget;
  if (!a.frequencies.empty()) request.frequencies = ExpertFrequencies::load(a.frequencies);
  request.calibration_text = a.calib;
  request.calibration.seq_len = a.calib_seq_len;
  request.calibration.max_tokens = a.calib_tokens;
  request.out = a.out;
  request.dequantized = a.dequantized;
  request.replace_existing = a.force;
  request.nonfinite = a.nonfinite == "skip" ? jobs::NonFiniteMatrices::Skip : jobs::NonFiniteMatrices::Stop;
  request.on_note = [](const std::string& line) { std::fprintf(stderr, "moewb: %s\n", line.c_str()); };
  const std::string path = resolveModelPath(a.model);
  request.catalog = std::make_shared<ModelCatalog>(Checkpoint::open(path));

  // Chosen after the options were read, so a bad option never waits for the GPU to start.
  const std::unique_ptr<BatchBackend> backend = quantBackendFor(*device, "quantize");
  request.pipeline.backend = backend.get();
  // The calibration passes (GPTQ, QMoE) run on the GPU engine where the quantizer runs on the GPU.
  request.calibration_backend = backend ? app::sharedGpuEngine() : nullptr;
  request.pipeline.max_batch = a.gpu_batch;
  const jobs::QuantizeJobResult job = jobs::runQuantizeJob(request, makeCliProgress("quantize"));
  const ModelQuantization& result = job.quantization;
  const quant::QuantizeSettings& s = request.settings;
  const std::string& policy_text = result.policy;
  for (const auto& line : result.fallbacks) std::fprintf(stderr, "moewb: %s\n", line.c_str());
  printMethodFallbacks(result);

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
        {"method", s.method},
        {"settings", method.settingsJson(s)},
        {"policy", policy_text},
        {"compensator", method.option("compensator") ? methods::optionValue(*method.option("compensator"), s) : ""},
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
    if (method.option("bits")) j["bits"] = s.grouped.bits;
    if (method.option("group")) j["group"] = s.grouped.group;
    for (const auto& q : result.matrices) {
      nlohmann::json t = {{"rel_error", q.rel_error},
                          {"rank", q.rank},
                          {"bytes", q.bytes},
                          {"bits_per_weight", 8.0 * double(q.bytes) / double(q.source.rows * q.source.cols)},
                          {"compensator_bytes", q.compensator_bytes},
                          {"original_bytes", q.original_bytes},
                          {"kurtosis", q.kurtosis},
                          {"iterations", q.curve.size()}};
      // Grouped codes say their width; other stored forms their kind.
      if (q.payload)
        t["payload"] = q.payload->kind();
      else
        t["bits"] = q.base.bits;
      if (!q.fallback.empty()) t["fallback"] = q.fallback;
      if (!q.measures.empty()) t["measures"] = q.measures;
      j["tensors"][q.source.name] = std::move(t);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%-64s %5s %10s %12s %12s\n", "tensor", "rank", "rel_error", "bytes", "comp_bytes");
  for (const auto& q : result.matrices)
    std::printf("%-64s %5d %10.6f %12lld %12lld\n", q.source.name.c_str(), q.rank, q.rel_error,
                static_cast<long long>(q.bytes), static_cast<long long>(q.compensator_bytes));
  std::string options_text;
  for (const methods::OptionSpec& spec : method.options())
    options_text += fmt::format(" {}={}", spec.name, methods::optionValue(spec, s));
  std::printf("\n%s%s%s%s: %zu matrices, mean rel. error %.6f, %.1f s on %s\n", s.method.c_str(),
              options_text.c_str(),
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
  const auto all = methods::MethodRegistry::instance().all();
  auto* cmd = root.add_subcommand("quantize", "Quantize the weight matrices with a registered method and export");
  addModelArgument(*cmd, a->model);
  std::vector<std::string> names;
  std::string method_help = "Compression method:";
  for (const methods::WeightMethod* m : all) {
    names.emplace_back(m->name());
    method_help += fmt::format("\n  {}: {}", m->name(), m->summary());
  }
  cmd->add_option("--method", a->method, method_help)->check(CLI::IsMember(names))->capture_default_str();
  // One flag per option name over all methods; its help says which methods take it, and what each
  // accepts where methods differ (gptq's --group takes 0 for one group per row, rtn's does not).
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> takes;  // name -> (method, values)
  std::map<std::string, std::string> help;
  for (const methods::WeightMethod* m : all)
    for (const methods::OptionSpec& spec : m->options()) {
      takes[spec.name].emplace_back(std::string(m->name()),
                                    fmt::format("{}; default {}", methods::expectedText(spec), spec.default_value));
      help.emplace(spec.name, spec.help);
    }
  for (const auto& [name, users] : takes) {
    bool same = true;
    for (const auto& u : users) same = same && u.second == users.front().second;
    std::string text = help[name] + " (";
    if (same) {
      for (std::size_t i = 0; i < users.size(); ++i) text += (i ? ", " : "") + users[i].first;
      text += "; " + users.front().second;
    } else {
      for (std::size_t i = 0; i < users.size(); ++i) text += (i ? " | " : "") + users[i].first + ": " + users[i].second;
    }
    a->option_flags[name] = cmd->add_option("--" + name, a->option_text[name], text + ")");
  }
  cmd->add_option("--policy", a->policy,
                  "MiLo rank policy, e.g. uniform-16, dense-512+kurtosis-16, 'sparse-8;*.q_proj.weight=64' "
                  "(default uniform-16)");
  cmd->add_option("--budget", a->budget, "MiLo: choose ranks so the model fits in SIZE (e.g. 200MB)");
  cmd->add_option("--out", a->out, "Export folder (compressed safetensors + manifest.json)");
  cmd->add_flag("--dequantized", a->dequantized, "Export a bf16 checkpoint in the original layout instead");
  cmd->add_flag("--force", a->force,
                "Replace an existing --out folder; only a previous moewb export is replaced, never the source "
                "checkpoint or another folder");
  cmd->add_option("--nonfinite", a->nonfinite,
                  "Matrices holding NaN/Inf weights: stop (an error naming them all) or skip (leave them "
                  "unquantized, named in a note)")
      ->check(CLI::IsMember({"stop", "skip"}))
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print the report as JSON");
  cmd->add_option("--frequencies", a->frequencies, "Expert activation counts for frequency-R (JSON or CSV)");
  cmd->add_option("--calib", a->calib, "Calibration text for methods that need it (tokenized with the model's tokenizer)");
  cmd->add_option("--calib-tokens", a->calib_tokens, "Calibration tokens per matrix at most (0: all)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  cmd->add_option("--calib-seq-len", a->calib_seq_len, "Calibration window length in tokens")
      ->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--only", a->only, "Quantize only matrices whose name matches this glob ('*' wildcard)");
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

// SPDX-License-Identifier: MIT
// The end-to-end quantization benchmark on a generated model (bench_pipeline.h). Nothing here is
// benchmark-only except the source: the rank policy, quantizeModel and the backend are what
// `moewb quantize` runs; the synthetic source replaces the checkpoint.
#include "bench_pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_progress.h"
#include "moewb/error.h"
#include "moewb/process_memory.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/quant/rank_policy.h"
#include "moewb/quant/synthetic_source.h"
#include "quant_device.h"

namespace moewb::cli {
namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct KindStats {
  std::size_t count = 0;
  double error_sum = 0;
  int min_rank = 0, max_rank = 0;
  double rank_sum = 0;
  void add(const quant::QuantizedMatrix& q) {
    min_rank = count == 0 ? q.rank : std::min(min_rank, q.rank);
    max_rank = count == 0 ? q.rank : std::max(max_rank, q.rank);
    ++count;
    error_sum += q.rel_error;
    rank_sum += q.rank;
  }
  double meanError() const { return count ? error_sum / double(count) : 0; }
  double meanRank() const { return count ? rank_sum / double(count) : 0; }
  nlohmann::json json() const {
    return {{"matrices", count},
            {"mean_rel_error", meanError()},
            {"min_rank", min_rank},
            {"mean_rank", meanRank()},
            {"max_rank", max_rank}};
  }
};

}  // namespace

void runSyntheticQuantizeBench(const SyntheticBenchArgs& a) {
  using namespace moewb::quant;
  auto spec = syntheticModelPreset(a.preset);
  if (!spec) {
    std::string names;
    for (const auto& n : syntheticModelPresetNames()) names += (names.empty() ? "" : ", ") + n;
    throw Error(fmt::format("{}: --synthetic '{}' is not a known model; expected one of: {}", a.command,
                            a.preset, names));
  }
  if (a.layers > 0) spec->layers = a.layers;
  spec->seed = a.seed;
  const auto device = parseComputeDevice(a.device);
  if (!device) throw Error(fmt::format("{}: --device '{}' is not auto, cpu or cuda", a.command, a.device));
  if (*device == ComputeDevice::Cuda) {
    const std::string why = gpuUnavailableReason();
    if (!why.empty())
      throw Error(
          fmt::format("{} --synthetic needs a CUDA GPU ({}); --device cpu runs the same pipeline on the "
                      "CPU (slow beyond small models)",
                      a.command, why));
  }
  QuantizeSettings s;
  s.method = "milo";
  s.grouped = {3, 64};
  s.milo.max_iters = a.iterations;
  const auto comp = parseCompensatorFormat(a.compensator);
  if (!comp)
    throw Error(
        fmt::format("{}: --compensator '{}' is not int3, int8, fp16 or fp32", a.command, a.compensator));
  s.milo.compensator = *comp;
  s.seed = a.seed;
  const RankPolicy policy = RankPolicy::parse(a.policy);

  const auto run0 = Clock::now();
  const SyntheticModelSource source(*spec);
  const std::vector<std::size_t> matrices = quantizableMatrices(source);
  double weights = 0;
  int64_t source_bytes = 0;
  for (std::size_t i : matrices) {
    weights += double(source.matrices()[i].rows * source.matrices()[i].cols);
    source_bytes += source.storedBytes(i);
  }
  std::fprintf(stderr, "moewb: synthetic %s: %zu matrices, %.2f G weights; computing ranks (%s)\n",
               spec->name.c_str(), matrices.size(), weights / 1e9, policy.text().c_str());
  const auto policy0 = Clock::now();
  const std::vector<int> ranks = ranksForPolicy(source, matrices, policy);
  const double policy_seconds = secondsSince(policy0);

  const std::unique_ptr<BatchBackend> backend = quantBackendFor(*device, a.command);
  PipelineOptions pipeline;
  pipeline.backend = backend.get();
  pipeline.max_batch = a.gpu_batch;
  pipeline.keep_payloads = false;  // the report is what this run is for; codes would need ~50 GB here
  const ModelQuantization result =
      quantizeModel(source, s, matrices, ranks, makeCliProgress("quantize"), {}, {}, pipeline);
  const double run_seconds = secondsSince(run0);

  KindStats all, attention, experts;
  for (const auto& q : result.matrices) {
    all.add(q);
    (source.classOf(q.matrix).block == Block::Expert ? experts : attention).add(q);
  }
  const PipelineTimings& t = result.timings;
  const int64_t peak_rss = peakResidentBytes();
  // The acceptance run: the whole model, its policy.
  const bool acceptance =
      spec->name == "mixtral-8x7b" && a.layers <= 0 && policy.text() == "dense-512+kurtosis-16";
  nlohmann::json j = {{"model", "synthetic " + spec->name},
                      {"layers", spec->layers},
                      {"experts_per_layer", spec->experts},
                      {"matrices", matrices.size()},
                      {"weights", weights},
                      {"source_bytes", source_bytes},
                      {"method", "milo"},
                      {"bits", 3},
                      {"group", 64},
                      {"iterations", a.iterations},
                      {"compensator", a.compensator},
                      {"policy", policy.text()},
                      {"seed", a.seed},
                      {"device", result.device},
                      {"device_matrices", result.backend_matrices},
                      {"cpu_fallbacks", result.fallbacks},
                      {"batches", t.batches},
                      {"largest_batch", t.largest_batch},
                      {"seconds",
                       {{"rank_policy", policy_seconds},
                        {"generation", t.read},
                        {"upload", t.upload},
                        {"quantize", t.compute},
                        {"download", t.download},
                        {"store", t.store},
                        {"waiting_for_input", t.waiting_for_input},
                        {"device_total", t.backendSeconds()},
                        {"pipeline", result.seconds},
                        {"total", run_seconds}}},
                      {"mean_rel_error", all.meanError()},
                      {"attention", attention.json()},
                      {"experts", experts.json()},
                      {"peak_host_bytes", peak_rss}};
  if (acceptance)
    j["within_5_minutes_of_gpu_time"] = t.backendSeconds() <= 300.0 && result.backend_matrices > 0;

  if (!a.output.empty()) {
    std::ofstream f(a.output);
    if (!f) throw Error(fmt::format("{}: cannot write {}", a.command, a.output));
    f << j.dump(2) << "\n";
  }
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::ostringstream o;
  o << fmt::format(
      "Synthetic {}: {} layer(s) x {} experts, {} matrices ({:.2f} G weights, {:.1f} GB as bf16); MiLo 3-bit "
      "g64, {} "
      "iterations, {} compensators, policy {}, seed {}\n",
      spec->name, spec->layers, spec->experts, matrices.size(), weights / 1e9, double(source_bytes) / 1e9,
      a.iterations, a.compensator, policy.text(), a.seed);
  o << fmt::format("Device: {}; {} batches, largest {} matrices; peak host memory {:.1f} GB\n\n",
                   result.device, t.batches, t.largest_batch, double(peak_rss) / 1e9);
  o << "| stage | seconds | runs on |\n|---|---|---|\n";
  o << fmt::format(
      "| rank policy (generate + kurtosis of every matrix) | {:.2f} | CPU, before the pipeline |\n",
      policy_seconds);
  o << fmt::format("| generation of the batches | {:.2f} | CPU reader thread, overlapped |\n", t.read);
  o << fmt::format("| upload (pinned staging + host to device) | {:.2f} | device thread |\n", t.upload);
  o << fmt::format("| quantize (MiLo) | {:.2f} | device |\n", t.compute);
  o << fmt::format("| download (device to host + unpack) | {:.2f} | device thread |\n", t.download);
  o << fmt::format("| store (compensators, errors) | {:.2f} | CPU store thread, overlapped |\n", t.store);
  o << fmt::format("| device waiting for generation | {:.2f} | |\n", t.waiting_for_input);
  o << fmt::format("| **device time (upload + quantize + download)** | **{:.2f}** | |\n", t.backendSeconds());
  o << fmt::format("| pipeline wall clock | {:.2f} | |\n", result.seconds);
  o << fmt::format("| whole run wall clock | {:.2f} | |\n\n", run_seconds);
  o << fmt::format("Mean relative error ||W - W^|| / ||W||: {:.5f} (attention {:.5f}, experts {:.5f})\n",
                   all.meanError(), attention.meanError(), experts.meanError());
  o << fmt::format("Ranks: attention {}..{} (mean {:.1f}), experts {}..{} (mean {:.1f})\n",
                   attention.min_rank, attention.max_rank, attention.meanRank(), experts.min_rank,
                   experts.max_rank, experts.meanRank());
  for (const auto& line : result.fallbacks) o << "CPU fallback: " << line << "\n";
  if (acceptance)
    o << fmt::format("Acceptance (Mixtral-8x7B shapes, dense-512+kurtosis-16 in <= 5 min of GPU time): {}\n",
                     t.backendSeconds() <= 300.0 && result.backend_matrices > 0 ? "met" : "NOT met");
  std::printf("%s", o.str().c_str());
}

}  // namespace moewb::cli

// SPDX-License-Identifier: MIT
// Inference engine throughput on the embedded demo model, tiny-mixtral (`moewb bench engine`):
// perplexity evaluation (forward + LM head + float64 log-softmax), routing only (no LM head), the 64-token
// KV capture, greedy decoding with a KV cache (batch 1 and 16) and the expert GEMM path. Tokens are
// deterministic pseudo-random ids (the content does not change the work). The whole 139k-token test split
// is measured with `moewb eval` (docs/engine.md).
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "moewb/demo_model.h"
#include "moewb/engine/engine.h"
#include "moewb/engine/evaluate.h"
#include "moewb/engine/generate.h"
#include "moewb/engine/kernels.h"
#include "moewb/engine/kv_capture.h"
#include "moewb/engine/weight_provider.h"

namespace {

const moewb::engine::MoeEngine& demoEngine() {
  static const auto engine = moewb::engine::MoeEngine::open(moewb::demoModelPath());
  return *engine;
}

std::vector<int32_t> pseudoText(int64_t n, int vocab) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> d(3, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& i : ids) i = d(rng);
  return ids;
}

// Tokens per second of the reference protocol: windows of 256, batches of `range(0)` tokens.
void engine_eval_tiny_mixtral(benchmark::State& state) {
  const auto& engine = demoEngine();
  const int windows = 32;
  const auto ids = pseudoText(windows * 256, engine.config().vocab);
  moewb::engine::EvalOptions options;
  options.batch_tokens = state.range(0);
  for (auto _ : state) {
    auto r = moewb::engine::evaluatePerplexity(engine, ids, options);
    benchmark::DoNotOptimize(r.ppl);
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(ids.size()), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(engine_eval_tiny_mixtral)->Arg(2048)->Arg(8192)->Unit(benchmark::kMillisecond)->UseRealTime();

void engine_freq_tiny_mixtral(benchmark::State& state) {
  const auto& engine = demoEngine();
  const auto ids = pseudoText(32 * 256, engine.config().vocab);
  for (auto _ : state) {
    auto f = moewb::engine::measureExpertFrequency(engine, ids, {});
    benchmark::DoNotOptimize(f.tokens);
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(ids.size()), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(engine_freq_tiny_mixtral)->Unit(benchmark::kMillisecond)->UseRealTime();

void engine_kv_capture_prompt64(benchmark::State& state) {
  const auto& engine = demoEngine();
  const auto ids = pseudoText(64, engine.config().vocab);
  for (auto _ : state) {
    auto c = moewb::engine::captureKv(engine, ids);
    benchmark::DoNotOptimize(c.attention.data());
  }
}
BENCHMARK(engine_kv_capture_prompt64)->Unit(benchmark::kMillisecond)->UseRealTime();

// `moewb generate --batch N`: `range(0)` sequences of a 64-token prompt, 32 greedy tokens each; decode
// tokens/s counts the tokens of the decoding passes (31 per sequence), prefill tokens/s the prompts'.
void engine_decode_tiny_mixtral(benchmark::State& state) {
  // As `moewb generate` runs it: the checkpoint's pages stay resident between steps (jobs/generate_job.cpp).
  static const auto decoding = [] {
    auto e = moewb::engine::MoeEngine::open(moewb::demoModelPath());
    e->setWeights(std::make_shared<moewb::engine::CheckpointWeights>(e->checkpointPtr(), false));
    return e;
  }();
  const auto& engine = *decoding;
  const std::vector<std::vector<int32_t>> prompts(static_cast<std::size_t>(state.range(0)),
                                                  pseudoText(64, engine.config().vocab));
  moewb::engine::GenerateOptions options;
  options.max_new_tokens = 32;
  options.stop_at_eos = false;
  moewb::engine::GenerationTimings total;
  for (auto _ : state) {
    const auto r = moewb::engine::generateBatch(engine, prompts, options);
    total.prefill_tokens += r.timings.prefill_tokens;
    total.prefill_seconds += r.timings.prefill_seconds;
    total.decode_tokens += r.timings.decode_tokens;
    total.decode_seconds += r.timings.decode_seconds;
  }
  state.counters["prefill tokens/s"] = total.prefillTokensPerSecond();
  state.counters["decode tokens/s"] = total.decodeTokensPerSecond();
}
BENCHMARK(engine_decode_tiny_mixtral)->Arg(1)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

// One expert's three projections for `range(0)` routed tokens (the MoE block's inner loop): GFLOP/s of
// the GEMM seam that a GPU backend would replace.
void engine_expert_gemm(benchmark::State& state) {
  const int64_t m = state.range(0), hidden = 256, inter = 512;
  moewb::MatrixRM x = moewb::MatrixRM::Random(m, hidden), wg = moewb::MatrixRM::Random(inter, hidden),
                  wu = moewb::MatrixRM::Random(inter, hidden), wd = moewb::MatrixRM::Random(hidden, inter);
  moewb::MatrixRM g(m, inter), u(m, inter), y(m, hidden);
  for (auto _ : state) {
    moewb::engine::linear(x.data(), m, wg, nullptr, g.data());
    moewb::engine::linear(x.data(), m, wu, nullptr, u.data());
    for (int64_t i = 0; i < g.size(); ++i) g.data()[i] = moewb::engine::silu(g.data()[i]) * u.data()[i];
    moewb::engine::linear(g.data(), m, wd, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      6.0 * m * hidden * inter, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(engine_expert_gemm)->Arg(512)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

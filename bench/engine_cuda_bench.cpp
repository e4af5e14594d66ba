// SPDX-License-Identifier: MIT
// The engine's CUDA path (`moewb bench engine --filter cuda`): the same evaluation as
// engine_eval_tiny_mixtral with the weight GEMMs on cuBLAS, so that CPU and GPU tokens/s come from one
// process and one set of inputs; and the expert GEMM seam including its PCIe transfers. Without a GPU (or
// in a build without CUDA) each benchmark is skipped with the reason.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "moewb/demo_model.h"
#include "moewb/engine/engine.h"
#include "moewb/engine/evaluate.h"
#include "moewb/engine/generate.h"
#include "moewb/engine/kernels.h"

#ifdef MOEWB_HAVE_CUDA
#include "moewb/gpu/cublas_linear_backend.h"
#include "moewb/gpu/device_engine.h"
#endif

namespace {

#ifdef MOEWB_HAVE_CUDA

// nullptr after a skip with the reason. `offload_all` puts every GEMM on the GPU, ignoring the cost model.
std::shared_ptr<moewb::gpu::CublasLinearBackend> backendOrSkip(benchmark::State& state, bool offload_all) {
  moewb::gpu::CublasBackendOptions options;
  options.offload_all = offload_all;
  std::string why;
  auto backend = moewb::gpu::CublasLinearBackend::create(options, &why);
  if (!backend) state.SkipWithError(why.c_str());  // e.g. "no usable CUDA device: ..."
  return backend;
}

std::vector<int32_t> pseudoText(int64_t n, int vocab) {
  std::mt19937 rng(42);  // the same ids as engine_eval_tiny_mixtral
  std::uniform_int_distribution<int32_t> d(3, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& i : ids) i = d(rng);
  return ids;
}

// Tokens per second of 32 windows of 256 with `range(0)` tokens per batch; range(1) = 1: every GEMM on
// the GPU, 0: the cost model decides (the CLI's default). Counters show how many GEMMs went where.
void engine_eval_tiny_mixtral_cuda(benchmark::State& state) {
  auto backend = backendOrSkip(state, state.range(1) == 1);
  if (!backend) return;
  auto engine = moewb::engine::MoeEngine::open(moewb::demoModelPath());
  engine->setLinearBackend(backend);
  const auto ids = pseudoText(32 * 256, engine->config().vocab);
  moewb::engine::EvalOptions options;
  options.batch_tokens = state.range(0);
  for (auto _ : state) {
    auto r = moewb::engine::evaluatePerplexity(*engine, ids, options);
    benchmark::DoNotOptimize(r.ppl);
  }
  const auto s = backend->stats();
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(ids.size()), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gpu_gemm_share"] = s.gpu_flops / std::max(1.0, s.gpu_flops + s.cpu_flops);
  state.counters["gpu_gemms"] = static_cast<double>(s.gpu_calls);
  state.counters["cpu_gemms"] = static_cast<double>(s.cpu_calls);
}
BENCHMARK(engine_eval_tiny_mixtral_cuda)
    ->Args({2048, 0})
    ->Args({8192, 0})
    ->Args({8192, 1})
    ->ArgNames({"batch", "all_on_gpu"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The engine on the GPU (gpu::DeviceEngine): perplexity of 32 windows of 256 with `range(0)` tokens per
// pass, range(1) = 1 bf16 / 0 fp32; the weights are loaded (and a warm-up pass run) before the timing, as
// `moewb eval` does. Compare with engine_eval_tiny_mixtral (the CPU engine) in the same run.
void engine_eval_tiny_mixtral_device(benchmark::State& state) {
  moewb::gpu::DeviceEngineOptions options;
  options.precision = state.range(1) == 1 ? moewb::gpu::DeviceEngineOptions::Precision::Bf16
                                          : moewb::gpu::DeviceEngineOptions::Precision::Fp32;
  std::string why;
  auto gpu = moewb::gpu::DeviceEngine::create(options, &why);
  if (!gpu) return state.SkipWithError(why.c_str());
  auto engine = moewb::engine::MoeEngine::open(moewb::demoModelPath());
  engine->setForwardBackend(gpu);
  const auto ids = pseudoText(32 * 256, engine->config().vocab);
  moewb::engine::EvalOptions eval;
  eval.batch_tokens = state.range(0);
  engine->prepareBackend();
  moewb::engine::evaluatePerplexity(*engine, ids, eval);  // warm-up: kernels of every shape loaded
  double seconds = 0;
  for (auto _ : state) {
    auto r = moewb::engine::evaluatePerplexity(*engine, ids, eval);
    seconds += r.seconds;
    benchmark::DoNotOptimize(r.ppl);
  }
  state.counters["tokens/s"] = static_cast<double>(ids.size()) * state.iterations() / std::max(seconds, 1e-9);
}
BENCHMARK(engine_eval_tiny_mixtral_device)
    ->Args({2048, 1})
    ->Args({16384, 1})
    ->Args({16384, 0})
    ->ArgNames({"batch", "bf16"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Greedy decoding on the GPU with the device KV cache: `range(0)` sequences of a 64-token prompt, 64 new
// tokens each (bf16); decode tokens/s counts the tokens of the decoding passes.
void engine_decode_tiny_mixtral_device(benchmark::State& state) {
  std::string why;
  auto gpu = moewb::gpu::DeviceEngine::create({}, &why);
  if (!gpu) return state.SkipWithError(why.c_str());
  auto engine = moewb::engine::MoeEngine::open(moewb::demoModelPath());
  engine->setForwardBackend(gpu);
  const std::vector<std::vector<int32_t>> prompts(static_cast<std::size_t>(state.range(0)),
                                                  pseudoText(64, engine->config().vocab));
  moewb::engine::GenerateOptions options;
  options.max_new_tokens = 64;
  options.stop_at_eos = false;
  moewb::engine::generateBatch(*engine, prompts, options);  // warm-up
  moewb::engine::GenerationTimings total;
  for (auto _ : state) {
    const auto r = moewb::engine::generateBatch(*engine, prompts, options);
    total.prefill_tokens += r.timings.prefill_tokens;
    total.prefill_seconds += r.timings.prefill_seconds;
    total.decode_tokens += r.timings.decode_tokens;
    total.decode_seconds += r.timings.decode_seconds;
  }
  state.counters["prefill tokens/s"] = total.prefillTokensPerSecond();
  state.counters["decode tokens/s"] = total.decodeTokensPerSecond();
}
BENCHMARK(engine_decode_tiny_mixtral_device)->Arg(1)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

// engine_expert_gemm with every projection on cuBLAS: GFLOP/s including the upload of the three weight
// matrices and the activations per call (what the engine pays), against the CPU numbers of that benchmark.
void engine_expert_gemm_cuda(benchmark::State& state) {
  auto backend = backendOrSkip(state, true);
  if (!backend) return;
  const int64_t m = state.range(0), hidden = 256, inter = 512;
  moewb::MatrixRM x = moewb::MatrixRM::Random(m, hidden), wg = moewb::MatrixRM::Random(inter, hidden),
                  wu = moewb::MatrixRM::Random(inter, hidden), wd = moewb::MatrixRM::Random(hidden, inter);
  moewb::MatrixRM g(m, inter), u(m, inter), y(m, hidden);
  const moewb::engine::ScopedLinearBackend on_gpu(backend.get());
  for (auto _ : state) {
    moewb::engine::linear(x.data(), m, wg, nullptr, g.data());
    moewb::engine::linear(x.data(), m, wu, nullptr, u.data());
    moewb::engine::siluMul(g.data(), u.data(), g.size());
    moewb::engine::linear(g.data(), m, wd, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      6.0 * m * hidden * inter, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(engine_expert_gemm_cuda)->Arg(512)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();

#else

void engine_eval_tiny_mixtral_cuda(benchmark::State& state) {
  state.SkipWithError("this moewb was built without CUDA (no cuBLAS engine path to measure)");
}
BENCHMARK(engine_eval_tiny_mixtral_cuda);

#endif

}  // namespace

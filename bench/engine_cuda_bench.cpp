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
#include "moewb/engine/kernels.h"

#ifdef MOEWB_HAVE_CUDA
#include "moewb/gpu/cublas_linear_backend.h"
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

// SPDX-License-Identifier: MIT
// Quantizer benchmarks (`moewb bench quant`): one Mixtral-sized expert matrix 4096x14336 fp32 with
// heavy-tailed (Student-t, 5 degrees of freedom) weights; time and the relative Frobenius error of what
// is stored (counter rel_error). Work inside the matrix uses all worker threads.
#include <benchmark/benchmark.h>

#include <random>
#include <string_view>

#include "moewb/parallel.h"
#include "moewb/quant/milo.h"
#include "moewb/quant/model_quantizer.h"

namespace {

using moewb::MatrixRM;
namespace q = moewb::quant;

const MatrixRM& mixtralExpertMatrix() {
  static const MatrixRM w = [] {
    MatrixRM m(4096, 14336);
    std::mt19937_64 rng(42);
    std::student_t_distribution<float> t(5.0f);
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = 0.02f * t(rng);
    return m;
  }();
  return w;
}

void runQuant(benchmark::State& state, const char* method, int rank, q::SvdMethod svd) {
  const MatrixRM& w = mixtralExpertMatrix();
  q::QuantizeSettings s;
  s.method = method;
  s.grouped = {3, 64};
  s.milo.svd.method = svd;
  double err = 0;
  int iters = 0;
  for (auto _ : state) {
    const q::QuantizedMatrix r = q::quantizeMatrix(w, s, rank, 7, moewb::workerThreads());
    err = r.rel_error;
    iters = int(r.curve.size());
    benchmark::DoNotOptimize(r.base.codes.data());
  }
  state.counters["rel_error"] = err;
  state.counters["threads"] = moewb::workerThreads();
  if (std::string_view(method) == "milo") state.counters["milo_iters"] = iters;
}

void quant_rtn3_4096x14336(benchmark::State& state) {
  runQuant(state, "rtn", 0, q::SvdMethod::Exact);
}
void quant_hqq3_4096x14336(benchmark::State& state) {
  runQuant(state, "hqq", 0, q::SvdMethod::Exact);
}
void quant_milo3_r32_exact_4096x14336(benchmark::State& state) {
  runQuant(state, "milo", 32, q::SvdMethod::Exact);
}
void quant_milo3_r32_randomized_4096x14336(benchmark::State& state) {
  runQuant(state, "milo", 32, q::SvdMethod::Randomized);
}
void quant_truncated_svd_r32_exact_4096x14336(benchmark::State& state) {
  const MatrixRM& w = mixtralExpertMatrix();
  q::LowRankOptions o;
  o.threads = moewb::workerThreads();
  for (auto _ : state) benchmark::DoNotOptimize(q::truncatedSvd(w, 32, o).sigma.data());
}
void quant_truncated_svd_r32_randomized_4096x14336(benchmark::State& state) {
  const MatrixRM& w = mixtralExpertMatrix();
  q::LowRankOptions o;
  o.method = q::SvdMethod::Randomized;
  o.threads = moewb::workerThreads();
  for (auto _ : state) benchmark::DoNotOptimize(q::truncatedSvd(w, 32, o).sigma.data());
}

BENCHMARK(quant_rtn3_4096x14336)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(quant_hqq3_4096x14336)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(quant_truncated_svd_r32_exact_4096x14336)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);
BENCHMARK(quant_truncated_svd_r32_randomized_4096x14336)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);
BENCHMARK(quant_milo3_r32_randomized_4096x14336)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(quant_milo3_r32_exact_4096x14336)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

}  // namespace

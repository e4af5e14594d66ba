// SPDX-License-Identifier: MIT
// The engine's CUDA path (gpu::CublasLinearBackend) against the CPU engine: logits of the demo model,
// perplexity over windows of the demo text, and the GEMM itself on fresh random shapes (odd sizes, one
// token, with and without bias, buffers growing and shrinking, transfers in several staging chunks).
// Skips without a usable GPU. The demo model is found through MOEWB_DEMO_MODEL when set (a copy of the
// tree elsewhere, e.g. the GPU machine), else the build's source tree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <random>
#include <thread>

#include "moewb/demo_model.h"
#include "moewb/engine/engine.h"
#include "moewb/engine/evaluate.h"
#include "moewb/engine/kernels.h"
#include "moewb/engine/variants.h"
#include "moewb/gpu/cublas_linear_backend.h"
#include "moewb/gpu/device.h"
#include "gpu_test_support.h"

namespace moewb::gpu {
namespace {

// With offload_all false, the cost model of a fixed CPU (16 cores of a baseline build, the GPU machine's)
// rather than this machine's: the split between GPU and CPU calls, and so the test, do not depend on the
// core count where it runs.
std::shared_ptr<CublasLinearBackend> makeBackend(bool offload_all, int64_t staging_bytes = int64_t{8} << 20,
                                                 bool tf32 = false) {
  CublasBackendOptions o;
  o.offload_all = offload_all;
  o.cpu_gflops = 96;
  o.gemm.staging_bytes = staging_bytes;
  o.gemm.tf32 = tf32;
  std::string why;
  auto b = CublasLinearBackend::create(o, &why);
  EXPECT_TRUE(b) << why;
  return b;
}

std::string demoText() {
  return (std::filesystem::path(demoModelPath()).parent_path() / "demo-text" / "sample.txt").string();
}

std::vector<int32_t> demoIds(const engine::MoeEngine& e) {
  return engine::loadEvaluationIds(demoModelPath(), demoText(), "", e.config().bos_token_id, false);
}

// Both GEMMs round float32 products and sums in different orders (Eigen's blocked kernel vs cuBLAS's
// tiles), which moves each logit by a few ulps of the values summed. Against HF transformers (a third
// order) the CPU engine measured 1.1e-6 of max|logit| (docs/engine.md); 1e-5 leaves a 10x margin and is
// still far below any real defect (a wrong transpose, a missing bias or one routing decision flipped
// moves logits by >1e-2 of max|logit|).
constexpr double kLogitTolerance = 1e-5;

TEST(EngineCuda, LogitsOfA64TokenPromptMatchTheCpuEngine) {
  REQUIRE_GPU();
  auto engine = engine::MoeEngine::open(demoModelPath());
  auto ids = demoIds(*engine);
  ASSERT_GE(ids.size(), 64u);
  ids.resize(64);
  const MatrixRM cpu = engine->logits(ids);

  for (bool offload_all : {true, false}) {
    SCOPED_TRACE(offload_all ? "every GEMM on the GPU" : "cost model");
    auto backend = makeBackend(offload_all);
    ASSERT_TRUE(backend);
    engine->setLinearBackend(backend);
    const MatrixRM gpu = engine->logits(ids);
    engine->setLinearBackend(nullptr);
    const double max_logit = cpu.cwiseAbs().maxCoeff();
    const double max_diff = (gpu - cpu).cwiseAbs().maxCoeff();
    std::printf(
        "[ measured ] 64-token logits, %s: max|diff| = %.3g = %.3g of max|logit| (%.3g); %lld GEMMs on "
        "the GPU, %lld on the CPU\n",
        offload_all ? "all on GPU" : "cost model", max_diff, max_diff / max_logit, max_logit,
        static_cast<long long>(backend->stats().gpu_calls),
        static_cast<long long>(backend->stats().cpu_calls));
    EXPECT_TRUE(gpu.allFinite());
    EXPECT_LE(max_diff, kLogitTolerance * max_logit);
    if (offload_all) {
      EXPECT_EQ(backend->stats().cpu_calls, 0);
      EXPECT_GT(backend->stats().gpu_calls, 4 * 5);  // at least q,k,v,o and the router of the 4 layers
    }
  }
}

TEST(EngineCuda, PerplexityOverDemoTextWindowsMatchesTheCpuEngine) {
  REQUIRE_GPU();
  auto engine = engine::MoeEngine::open(demoModelPath());
  const auto ids = demoIds(*engine);
  engine::EvalOptions options;
  options.seq_len = 256;
  options.max_windows = 6;
  options.batch_tokens = 1024;  // 4 windows + 2: two forward passes, the second one partly filled
  const auto cpu = engine::evaluatePerplexity(*engine, ids, options);
  ASSERT_EQ(cpu.windows, 6);

  for (bool offload_all : {false, true}) {
    SCOPED_TRACE(offload_all ? "every GEMM on the GPU" : "cost model");
    auto backend = makeBackend(offload_all);
    ASSERT_TRUE(backend);
    engine->setLinearBackend(backend);
    const auto gpu = engine::evaluatePerplexity(*engine, ids, options);
    engine->setLinearBackend(nullptr);
    const double rel = std::abs(gpu.ppl / cpu.ppl - 1.0);
    std::printf(
        "[ measured ] perplexity over %d windows, %s: cpu %.9f gpu %.9f relative %.3g; GEMMs gpu %lld "
        "cpu %lld\n",
        cpu.windows, offload_all ? "all on GPU" : "cost model", cpu.ppl, gpu.ppl, rel,
        static_cast<long long>(backend->stats().gpu_calls),
        static_cast<long long>(backend->stats().cpu_calls));
    // The mean NLL averages ~1500 per-token errors of the size bounded above: 1e-5 relative is 10x the
    // logit criterion's margin again (the brief asked for 1e-4).
    EXPECT_LE(rel, 1e-5);
    EXPECT_EQ(gpu.tokens_scored, cpu.tokens_scored);
    // The same routing decisions. A router logit moves by ~1e-6, so a top-2 choice flips only where two
    // experts' scores are that close: at most one of the ~6,000 choices may flip (a flip moves one count
    // from one expert to another: a difference of 2).
    ASSERT_EQ(gpu.frequency.layers.size(), cpu.frequency.layers.size());
    int64_t count_difference = 0;
    for (std::size_t l = 0; l < cpu.frequency.layers.size(); ++l)
      for (std::size_t e = 0; e < cpu.frequency.layers[l].counts.size(); ++e)
        count_difference += std::abs(gpu.frequency.layers[l].counts[e] - cpu.frequency.layers[l].counts[e]);
    std::printf("[ measured ] routing count difference: %lld\n", static_cast<long long>(count_difference));
    EXPECT_LE(count_difference, 2);
    EXPECT_GT(backend->stats().gpu_calls, 0);  // even the cost model sends the 1024-token GEMMs to the GPU
  }
}

// Float64 reference of y = x w^T + b and the per-element bound of a float32 dot product of length `in`
// summed in any order: |error| <= in * eps * sum |x_k w_k| (Higham's gamma_n); 4 eps covers the blocked
// and tree-like orders both libraries use with a wide margin for random data.
struct Reference {
  std::vector<double> y, abs_sum;
};
Reference reference(const MatrixRM& x, const MatrixRM& w, const float* bias) {
  const int64_t n = x.rows(), in = x.cols(), out = w.rows();
  Reference r;
  r.y.assign(static_cast<std::size_t>(n * out), 0.0);
  r.abs_sum.assign(r.y.size(), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0, a = 0;
      for (int64_t k = 0; k < in; ++k) {
        const double p = double(x(i, k)) * double(w(o, k));
        s += p;
        a += std::abs(p);
      }
      if (bias) s += bias[o], a += std::abs(bias[o]);
      r.y[i * out + o] = s;
      r.abs_sum[i * out + o] = a;
    }
  return r;
}

struct Shape {
  int64_t n, in, out;
};

TEST(EngineCuda, LinearMatchesTheCpuOnRandomShapes) {
  REQUIRE_GPU();
  // Odd sizes, one token, a single output, degenerate n = 0, sizes around the staging chunk, shapes of the
  // demo model and of a real expert; the order makes the device buffers grow, shrink and grow again.
  const std::vector<Shape> shapes = {{1, 1, 1},        {1, 256, 8},   {3, 17, 33},      {7, 129, 65},
                                     {64, 256, 512},   {0, 256, 512}, {513, 255, 1025}, {1, 1000, 1001},
                                     {2048, 512, 256}, {2, 4096, 1},  {37, 4096, 1433}, {1, 7, 3}};
  // Default staging, and staging of 1000 floats (4000 bytes) so that every operand crosses many chunks,
  // including odd chunk counts and a short last chunk.
  for (int64_t staging : {int64_t{8} << 20, int64_t{4000}}) {
    auto backend = makeBackend(/*offload_all=*/true, staging);
    ASSERT_TRUE(backend);
    std::mt19937 rng(1234 + static_cast<uint32_t>(staging));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (const Shape& s : shapes)
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(testing::Message() << "n=" << s.n << " in=" << s.in << " out=" << s.out
                                        << " bias=" << with_bias << " staging=" << staging);
        MatrixRM x(s.n, s.in), w(s.out, s.in);
        for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = nd(rng);
        for (int64_t i = 0; i < w.size(); ++i) w.data()[i] = nd(rng) * 0.05f;
        std::vector<float> bias(static_cast<std::size_t>(s.out));
        for (auto& b : bias) b = nd(rng);
        const float* b = with_bias ? bias.data() : nullptr;
        // Poisoned outputs: an element the GPU path does not write stays NaN.
        MatrixRM y_gpu = MatrixRM::Constant(s.n, s.out, std::numeric_limits<float>::quiet_NaN());
        MatrixRM y_cpu = y_gpu;
        backend->linear(x.data(), s.n, w, b, y_gpu.data());
        engine::cpuLinear(x.data(), s.n, w, b, y_cpu.data());
        if (s.n == 0) continue;
        ASSERT_TRUE(y_gpu.allFinite());
        const Reference ref = reference(x, w, b);
        const double eps = std::numeric_limits<float>::epsilon();
        double worst_bound_ratio = 0;
        for (int64_t i = 0; i < y_gpu.size(); ++i) {
          const double bound = 4 * eps * ref.abs_sum[i] + 1e-30;
          worst_bound_ratio = std::max(worst_bound_ratio, std::abs(y_gpu.data()[i] - ref.y[i]) / bound);
        }
        EXPECT_LE(worst_bound_ratio, 1.0);
        // And against the CPU engine, normalised by the output's scale (ggml's backend-test measure): its
        // largest value, or the typical size of a sum of `in` random terms where a few outputs all happen
        // to be small (n = 2, out = 1).
        double scale = y_cpu.cwiseAbs().maxCoeff();
        for (double a : ref.abs_sum) scale = std::max(scale, a / std::sqrt(double(s.in)));
        EXPECT_LE((y_gpu - y_cpu).cwiseAbs().maxCoeff(), 1e-5 * scale);
      }
    EXPECT_EQ(backend->stats().cpu_calls, 2);  // the two n = 0 calls; everything else ran on the GPU
  }
}

TEST(EngineCuda, Tf32IsOptInAndLessExact) {
  REQUIRE_GPU();
  auto exact = makeBackend(true);
  auto tf32 = makeBackend(true, int64_t{8} << 20, /*tf32=*/true);
  ASSERT_TRUE(exact && tf32);
  EXPECT_FALSE(exact->options().gemm.tf32);  // the default stays exact float32
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  MatrixRM x(256, 1024), w(512, 1024);
  for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = nd(rng);
  for (int64_t i = 0; i < w.size(); ++i) w.data()[i] = nd(rng);
  MatrixRM cpu(256, 512), a(256, 512), b(256, 512);
  engine::cpuLinear(x.data(), 256, w, nullptr, cpu.data());
  exact->linear(x.data(), 256, w, nullptr, a.data());
  tf32->linear(x.data(), 256, w, nullptr, b.data());
  const double scale = cpu.cwiseAbs().maxCoeff();
  const double e_exact = (a - cpu).cwiseAbs().maxCoeff() / scale,
               e_tf32 = (b - cpu).cwiseAbs().maxCoeff() / scale;
  std::printf("[ measured ] 256x1024x512 normalised error: float32 %.3g, tf32 %.3g\n", e_exact, e_tf32);
  EXPECT_LE(e_exact, 1e-5);
  EXPECT_LE(e_tf32, 1e-2);  // 10-bit mantissa products: ~1e-3
}

TEST(EngineCuda, CostModelKeepsTinyGemmsOnTheCpu) {
  REQUIRE_GPU();
  auto backend = makeBackend(false);  // 96 GFLOP/s of CPU
  ASSERT_TRUE(backend);
  EXPECT_FALSE(backend->offloads(1, 4096, 14336, false));   // one token through a Mixtral expert: PCIe-bound
  EXPECT_FALSE(backend->offloads(2048, 256, 8, false));     // the demo model's router: its input dominates
  EXPECT_TRUE(backend->offloads(512, 256, 4096, false));    // a 512-row block of the LM head
  EXPECT_TRUE(backend->offloads(512, 4096, 14336, false));  // a Mixtral expert with 512 tokens
  EXPECT_FALSE(backend->offloads(0, 256, 256, false));
}

// Two engines on two threads sharing one backend: their GEMMs take turns on the one stream and both
// get the single-threaded result.
TEST(EngineCuda, OneBackendServesEnginesOnSeveralThreads) {
  REQUIRE_GPU();
  auto backend = makeBackend(true);
  ASSERT_TRUE(backend);
  auto e1 = engine::MoeEngine::open(demoModelPath()), e2 = engine::MoeEngine::open(demoModelPath());
  e1->setLinearBackend(backend);
  e2->setLinearBackend(backend);
  auto ids = demoIds(*e1);
  ids.resize(96);
  const MatrixRM expected = e1->logits(ids);
  MatrixRM a, b;
  std::thread t1([&] { a = e1->logits(ids); });
  std::thread t2([&] { b = e2->logits(ids); });
  t1.join();
  t2.join();
  const double scale = expected.cwiseAbs().maxCoeff();
  EXPECT_LE((a - expected).cwiseAbs().maxCoeff(), 1e-6 * scale);
  EXPECT_LE((b - expected).cwiseAbs().maxCoeff(), 1e-6 * scale);
}

}  // namespace
}  // namespace moewb::gpu

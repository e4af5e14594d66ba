// SPDX-License-Identifier: MIT
// quantizeModel on the GPU backend against the CPU path on the demo model (tiny-mixtral: 112 matrices of
// 256x256, 128x256, 512x256 and 256x512; MOEWB_DEMO_MODEL points at a copy when the binary runs away from
// its source tree). Skips without a usable GPU.
//
// Tolerances, and why:
// - HQQ: the GPU kernel repeats the CPU's arithmetic step by step (separate roundings, means in double),
//   so scales are identical and only a float sum reordered in a zero update can flip a near-tie: at most
//   0.1% of codes may differ, at least 99% of groups must be identical (all 64 codes and the zero), and
//   each matrix's error within 0.1% (relative) of the CPU's.
// - MiLo: the two paths share the loop but not its parts: the GPU fits the residual by a warm-started
//   randomized subspace iteration (the CPU: an exact truncated SVD), runs a fixed number of iterations
//   and keeps the last (the CPU stops on a moving-average rule and keeps the best), and its HQQ steps use
//   the per-group stop rule (the CPU's MiLo the global one). Bits cannot match; error levels must: each
//   matrix's stored error within 5% (relative) of the CPU's, the mean within 2%.
// - Exact relations the GPU result must satisfy whatever the algorithm: with fp32 compensators the error
//   core measures on the downloaded codes and factors equals the error the GPU reported for its last
//   iteration (to 1e-3 relative: it catches any layout slip in u, v, codes, scales or zeros), and two runs
//   with the same seed and batch plan store identical codes and factors.
#include "moewb/gpu/quant_backend.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/demo_model.h"
#include "moewb/gpu/device.h"
#include "moewb/gpu/quantize.h"
#include "moewb/quant/export.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/quant/rank_policy.h"
#include "moewb/quant/synthetic_source.h"
#include "gpu_test_support.h"
#include "test_support.h"

namespace {

using namespace moewb::quant;

struct Demo {
  std::shared_ptr<moewb::ModelCatalog> catalog =
      std::make_shared<moewb::ModelCatalog>(moewb::Checkpoint::open(moewb::demoModelPath()));
  std::vector<std::size_t> matrices = quantizableMatrices(*catalog);
};

ModelQuantization onGpu(const Demo& d, const QuantizeSettings& s, const std::vector<int>& ranks,
                        int max_batch = 32) {
  std::string why;
  auto backend = moewb::gpu::makeQuantBackend(&why);
  if (!backend) throw std::runtime_error("no GPU backend: " + why);
  PipelineOptions o;
  o.backend = backend.get();
  o.max_batch = max_batch;
  return quantizeModel(*d.catalog, s, d.matrices, ranks, {}, {}, {}, o);
}

TEST(GpuBackend, SaysWhyWhenThereIsNoDevice) {
  std::string why;
  if (moewb::gpu::deviceAvailable(&why)) GTEST_SKIP() << "a GPU is present";
  std::string reason;
  EXPECT_EQ(moewb::gpu::makeQuantBackend(&reason), nullptr);
  EXPECT_FALSE(reason.empty());
}

TEST(GpuBackend, NamesWhatItCannotDo) {
  REQUIRE_GPU();
  auto backend = moewb::gpu::makeQuantBackend();
  ASSERT_TRUE(backend);
  EXPECT_NE(backend->name().find("cuda"), std::string::npos);
  QuantizeSettings s;
  s.method = "hqq";
  EXPECT_EQ(backend->unsupportedReason(s, 4096, 14336, 0), "");
  EXPECT_NE(backend->unsupportedReason(s, 4096, 100, 0), "") << "k must be a multiple of 64";
  s.grouped = {4, 64};
  EXPECT_NE(backend->unsupportedReason(s, 4096, 4096, 0), "");
  s.grouped = {3, 64};
  s.method = "rtn";
  EXPECT_NE(backend->unsupportedReason(s, 4096, 4096, 0), "");
  EXPECT_GT(backend->memoryBudget(), int64_t(1) << 30);
}

TEST(GpuQuantizeModel, HqqMatchesTheCpuPath) {
  REQUIRE_GPU();
  const Demo d;
  QuantizeSettings s;
  s.method = "hqq";
  const ModelQuantization cpu = quantizeModel(*d.catalog, s, d.matrices, {});
  const ModelQuantization gpu = onGpu(d, s, {});
  ASSERT_EQ(gpu.backend_matrices, d.matrices.size());
  EXPECT_NE(gpu.device.find("cuda"), std::string::npos) << gpu.device;
  EXPECT_TRUE(gpu.fallbacks.empty());
  int64_t codes = 0, codes_differ = 0, groups = 0, groups_identical = 0;
  for (std::size_t i = 0; i < d.matrices.size(); ++i) {
    const QuantizedMatrix &g = gpu.matrices[i], &c = cpu.matrices[i];
    SCOPED_TRACE(c.source.name);
    ASSERT_EQ(g.source.name, c.source.name);
    ASSERT_EQ(g.base.codes.size(), c.base.codes.size());
    EXPECT_EQ(g.base.scales, c.base.scales);
    EXPECT_NEAR(g.rel_error, c.rel_error, 1e-3 * c.rel_error);
    EXPECT_EQ(g.bytes, c.bytes);
    const int64_t gpr = c.base.groupsPerRow();
    for (int64_t r = 0; r < c.base.rows; ++r)
      for (int64_t gi = 0; gi < gpr; ++gi) {
        bool same = g.base.zeros[std::size_t(r * gpr + gi)] == c.base.zeros[std::size_t(r * gpr + gi)];
        for (int64_t j = gi * 64; j < std::min<int64_t>((gi + 1) * 64, c.base.cols); ++j) {
          const bool differ = g.base.codes[std::size_t(r * c.base.cols + j)] !=
                              c.base.codes[std::size_t(r * c.base.cols + j)];
          codes_differ += differ;
          same = same && !differ;
        }
        ++groups;
        groups_identical += same;
      }
    codes += int64_t(c.base.codes.size());
  }
  EXPECT_LE(double(codes_differ), 1e-3 * double(codes)) << codes_differ << " of " << codes << " codes differ";
  EXPECT_GE(double(groups_identical), 0.99 * double(groups)) << groups_identical << " of " << groups;
  std::printf("HQQ GPU vs CPU: %lld of %lld codes differ, %lld of %lld groups identical\n",
              static_cast<long long>(codes_differ), static_cast<long long>(codes),
              static_cast<long long>(groups_identical), static_cast<long long>(groups));
}

TEST(GpuQuantizeModel, MiloUniform16ReachesTheCpuErrorLevel) {
  REQUIRE_GPU();
  const Demo d;
  QuantizeSettings s;
  s.method = "milo";
  s.seed = 3;
  const auto ranks = ranksForPolicy(*d.catalog, d.matrices, RankPolicy::parse("uniform-16"));
  const ModelQuantization cpu = quantizeModel(*d.catalog, s, d.matrices, ranks);
  const ModelQuantization gpu = onGpu(d, s, ranks);
  ASSERT_EQ(gpu.backend_matrices, d.matrices.size());
  double cpu_sum = 0, gpu_sum = 0, worst = 0;
  for (std::size_t i = 0; i < d.matrices.size(); ++i) {
    const QuantizedMatrix &g = gpu.matrices[i], &c = cpu.matrices[i];
    SCOPED_TRACE(c.source.name);
    EXPECT_EQ(g.rank, 16);
    ASSERT_TRUE(g.u && g.v);
    EXPECT_EQ(g.u->format, CompensatorFormat::Int3);
    EXPECT_EQ(g.curve.size(), std::size_t(s.milo.max_iters)) << "the GPU runs every iteration";
    EXPECT_EQ(g.rel_error_float_compensators, g.curve.back()) << "and keeps the last";
    EXPECT_NEAR(g.rel_error, c.rel_error, 0.05 * c.rel_error);
    EXPECT_LT(g.rel_error, g.curve.front() * 1.5) << "the stored error is in line with the loop's";
    cpu_sum += c.rel_error;
    gpu_sum += g.rel_error;
    worst = std::max(worst, std::abs(g.rel_error - c.rel_error) / c.rel_error);
  }
  EXPECT_NEAR(gpu_sum, cpu_sum, 0.02 * cpu_sum);
  std::printf(
      "MiLo uniform-16: mean stored error GPU %.5f, CPU %.5f; worst matrix %.2f%% apart; %.2f s vs %.2f s\n",
      gpu_sum / double(d.matrices.size()), cpu_sum / double(d.matrices.size()), 100 * worst, gpu.seconds,
      cpu.seconds);
}

TEST(GpuQuantizeModel, DownloadedFactorsReproduceTheErrorTheGpuReported) {
  REQUIRE_GPU();
  const Demo d;
  QuantizeSettings s;
  s.method = "milo";
  s.milo.compensator = CompensatorFormat::Fp32;  // stored factors == the GPU's factors
  s.milo.max_iters = 5;
  const auto ranks = ranksForPolicy(*d.catalog, d.matrices, RankPolicy::parse("dense-64+sparse-8"));
  const ModelQuantization gpu = onGpu(d, s, ranks, 5);
  for (const auto& q : gpu.matrices) {
    SCOPED_TRACE(q.source.name);
    EXPECT_NEAR(q.rel_error, q.rel_error_float_compensators, 1e-3 * q.rel_error_float_compensators);
  }
}

TEST(GpuQuantizeModel, SameSeedAndBatchPlanGiveTheSameResult) {
  REQUIRE_GPU();
  const Demo d;
  QuantizeSettings s;
  s.method = "milo";
  s.milo.max_iters = 4;
  s.seed = 11;
  const auto ranks = ranksForPolicy(*d.catalog, d.matrices, RankPolicy::parse("uniform-8"));
  const ModelQuantization a = onGpu(d, s, ranks, 6), b = onGpu(d, s, ranks, 6);
  for (std::size_t i = 0; i < d.matrices.size(); ++i) {
    SCOPED_TRACE(a.matrices[i].source.name);
    EXPECT_EQ(a.matrices[i].base.codes, b.matrices[i].base.codes);
    EXPECT_EQ(a.matrices[i].base.zeros, b.matrices[i].base.zeros);
    EXPECT_EQ(a.matrices[i].u->codes, b.matrices[i].u->codes);
    EXPECT_EQ(a.matrices[i].v->scales, b.matrices[i].v->scales);
    EXPECT_EQ(a.matrices[i].rel_error, b.matrices[i].rel_error);
  }
}

TEST(GpuQuantizeModel, ExportOfAGpuResultLoadsBack) {
  REQUIRE_GPU();
  const Demo d;
  QuantizeSettings s;
  s.method = "milo";
  s.milo.max_iters = 3;
  const auto ranks = ranksForPolicy(*d.catalog, d.matrices, RankPolicy::parse("uniform-16"));
  ModelQuantization gpu = onGpu(d, s, ranks);
  gpu.policy = "uniform-16";
  const auto out = moewb::test::makeTempDir("moewb-gpu-export") / "export";
  writeCompressedModel(*d.catalog, gpu, out);
  const auto model = CompressedModel::open(out);
  EXPECT_EQ(model->quantizedNames().size(), d.matrices.size());
  for (const auto& q : gpu.matrices) {
    SCOPED_TRACE(q.source.name);
    const QuantizedMatrix back = model->read(q.source.name);
    EXPECT_EQ(back.base.codes, q.base.codes);
    EXPECT_EQ(back.base.scales, q.base.scales);
    EXPECT_EQ(back.base.zeros, q.base.zeros);
    EXPECT_EQ(back.rank, q.rank);
    EXPECT_EQ(dequantize(back), dequantize(q));
  }
}

// The kernel-level pieces the backend relies on: per-expert seeds make an expert's result independent of
// its batch-mates, and a reused workspace (grown for a larger shape, then used for a smaller one) gives
// the same result as fresh memory.
TEST(GpuMiloKernel, PerExpertSeedsAndAReusedWorkspace) {
  REQUIRE_GPU();
  using namespace moewb::gpu;
  const int64_t n = 192, k = 256;
  const int rank = 8;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> host(size_t(2 * n * k));
  for (auto& x : host) x = nd(rng);
  float *w = nullptr, *u = nullptr, *v = nullptr, *big = nullptr;
  uint8_t* codes = nullptr;
  ASSERT_EQ(cudaMalloc(&w, host.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&big, size_t(4 * 512 * 512) * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&codes, host.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&u, size_t(2 * n * rank) * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&v, size_t(2 * rank * k) * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(w, host.data(), host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(big, 0, size_t(4 * 512 * 512) * 4), cudaSuccess);
  GpuMiloOptions o;
  o.rank = rank;
  o.iterations = 4;
  auto codesOf = [&](int64_t experts) {
    std::vector<uint8_t> c(size_t(experts * n * k));
    EXPECT_EQ(cudaMemcpy(c.data(), codes, c.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return c;
  };
  // Expert 1 alone (seed 22) and as the second of a batch of two (seeds 21, 22).
  GpuMiloReport alone, pair;
  o.seeds = {22};
  Status s = miloCompressBatched(w + n * k, 1, n, k, o, codes, nullptr, nullptr, u, v, &alone, nullptr);
  ASSERT_TRUE(s.ok()) << s.message;
  const auto codes_alone = codesOf(1);
  GpuMiloWorkspace ws;
  o.seeds = {1, 2, 3, 4};
  s = miloCompressBatched(big, 4, 512, 512, o, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                          &ws);
  ASSERT_TRUE(s.ok()) << s.message;
  const int64_t grown = ws.bytes();
  EXPECT_GE(grown, miloWorkspaceBytes(4, 512, 512, rank) / 2);
  o.seeds = {21, 22};
  s = miloCompressBatched(w, 2, n, k, o, codes, nullptr, nullptr, u, v, &pair, nullptr, &ws);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(ws.bytes(), grown) << "a smaller call reuses the memory";
  const auto codes_pair = codesOf(2);
  int64_t differ = 0;
  for (int64_t i = 0; i < n * k; ++i) differ += codes_pair[size_t(n * k + i)] != codes_alone[size_t(i)];
  EXPECT_LE(differ, n * k / 1000) << "expert 1 starts from the same subspace in either batch";
  EXPECT_NEAR(pair.relative_error[1], alone.relative_error[0], 1e-4 * alone.relative_error[0]);
  o.seeds = {1};
  EXPECT_FALSE(miloCompressBatched(w, 2, n, k, o, codes, nullptr, nullptr, u, v, nullptr, nullptr, &ws).ok())
      << "one seed for two experts is refused";
  cudaFree(w);
  cudaFree(big);
  cudaFree(codes);
  cudaFree(u);
  cudaFree(v);
}

// The acceptance pipeline in small: a generated model with a kurtosis policy, through the GPU.
TEST(GpuQuantizeModel, SyntheticModelWithAKurtosisPolicyRunsOnTheGpu) {
  REQUIRE_GPU();
  const SyntheticModelSource source(*syntheticModelPreset("tiny-mixtral"));
  const auto mats = quantizableMatrices(source);
  const auto ranks = ranksForPolicy(source, mats, RankPolicy::parse("dense-512+kurtosis-16"));
  std::string why;
  auto backend = moewb::gpu::makeQuantBackend(&why);
  ASSERT_TRUE(backend) << why;
  PipelineOptions o;
  o.backend = backend.get();
  o.keep_payloads = false;
  QuantizeSettings s;
  s.method = "milo";
  const ModelQuantization q = quantizeModel(source, s, mats, ranks, {}, {}, {}, o);
  EXPECT_EQ(q.backend_matrices, mats.size());
  EXPECT_GT(q.timings.batches, 1);
  EXPECT_GT(q.timings.compute, 0);
  for (std::size_t i = 0; i < mats.size(); ++i) {
    EXPECT_EQ(q.matrices[i].rank, ranks[i]);
    EXPECT_GT(q.matrices[i].rel_error, 0.0);
    EXPECT_LT(q.matrices[i].rel_error, 0.25) << q.matrices[i].source.name;
  }
}

}  // namespace

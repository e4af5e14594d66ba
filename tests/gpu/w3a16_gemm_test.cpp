// SPDX-License-Identifier: MIT
// The W3A16 GEMM against a double-precision CPU reference over a sweep of shapes and batch sizes, with
// and without zeros and the low-rank compensator. Skips without a usable GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "moewb/gpu/device.h"
#include "moewb/gpu/int3_layout.h"
#include "moewb/gpu/w3a16.h"
#include "gpu_test_support.h"

namespace {

using namespace moewb::gpu;

template <typename T>
using Dev = test_support::DeviceBuffer<T>;

struct Case {
  int64_t n, k, m;
  bool symmetric;
  int rank;
  int split;
  int kernel = 0;  // W3A16Config::kernel: 0 = automatic (streaming kernel for m <= 32), 2 = pipelined
};

double runCase(const Case& c, uint32_t seed, bool* all_written) {
  std::mt19937 rng(seed);
  const int64_t n = c.n, k = c.k, m = c.m, groups = groupCount(n, k);
  const test_support::RandomInt3Weight weight = test_support::randomInt3Weight(n, k, c.symmetric, rng);
  const auto& [codes, scales, zeros] = weight;
  std::normal_distribution<float> nd(0.0f, 1.0f), cd(0.0f, 0.02f);
  std::vector<uint32_t> exported(static_cast<size_t>(int3Words(n, k))), kw(exported.size());
  packInt3Export(codes.data(), n * k, exported.data());
  std::vector<uint16_t> ks(static_cast<size_t>(groups)), kb(static_cast<size_t>(groups));
  EXPECT_TRUE(repackExportToW3A16(exported.data(), scales.data(), c.symmetric ? nullptr : zeros.data(), n, k, kw.data(),
                                  ks.data(), kb.data()).ok());
  std::vector<uint16_t> x(static_cast<size_t>(m * k)), u(static_cast<size_t>(n * c.rank)), v(static_cast<size_t>(c.rank * k));
  for (auto& e : x) e = floatToHalfBits(nd(rng));
  for (auto& e : u) e = floatToHalfBits(cd(rng));
  for (auto& e : v) e = floatToHalfBits(cd(rng));

  Dev<uint32_t> dw(kw.size());
  Dev<uint16_t> ds(ks.size()), db(kb.size()), dx(x.size()), dy(static_cast<size_t>(m * n)), du(u.size()), dv(v.size());
  dw.put(kw);
  ds.put(ks);
  db.put(kb);
  dx.put(x);
  if (c.rank) {
    du.put(u);
    dv.put(v);
  }
  const int64_t ws_bytes = w3a16WorkspaceBytes(n, c.rank);
  Dev<char> ws(static_cast<size_t>(ws_bytes));
  EXPECT_EQ(cudaMemset(ws.p, 0, size_t(ws_bytes)), cudaSuccess);
  W3A16Weights w{dw.p, ds.p, c.symmetric ? nullptr : db.p, n, k};
  LowRankCompensator comp{du.p, dv.p, c.rank};
  W3A16Config cfg;
  cfg.split_k = c.split;
  cfg.kernel = c.kernel;
  std::vector<uint16_t> y;
  // Twice: the second call checks that the first left the scratch clean.
  for (int rep = 0; rep < 2; ++rep) {
    EXPECT_EQ(cudaMemset(dy.p, 0xFF, size_t(m * n) * 2), cudaSuccess);  // NaN poison
    const Status s = w3a16Gemm(dx.p, w, dy.p, m, c.rank ? &comp : nullptr, ws.p, ws_bytes, nullptr, &cfg);
    EXPECT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    y = dy.get(size_t(m * n));
  }
  double num = 0, den = 0;
  *all_written = true;
  std::vector<double> t(static_cast<size_t>(m * c.rank), 0.0);
  for (int64_t mm = 0; mm < m; ++mm)
    for (int j = 0; j < c.rank; ++j)
      for (int64_t cc = 0; cc < k; ++cc)
        t[size_t(mm * c.rank + j)] += double(halfBitsToFloat(x[size_t(mm * k + cc)])) * halfBitsToFloat(v[size_t(j * k + cc)]);
  for (int64_t row = 0; row < n; ++row)
    for (int64_t mm = 0; mm < m; ++mm) {
      double ref = 0;
      for (int64_t cc = 0; cc < k; ++cc) ref += weight.value(k, row, cc) * halfBitsToFloat(x[size_t(mm * k + cc)]);
      for (int j = 0; j < c.rank; ++j) ref += t[size_t(mm * c.rank + j)] * halfBitsToFloat(u[size_t(row * c.rank + j)]);
      const double got = halfBitsToFloat(y[size_t(mm * n + row)]);
      if (!std::isfinite(got)) *all_written = false;
      num += (got - ref) * (got - ref);
      den += ref * ref;
    }
  return std::sqrt(num / den);
}

// Regression guard for the kernel: every shape class (one or several CTAs per strip, partial last CTA,
// long k), every batch tile (1, 2, 4, 8 n8 tiles, partially used), with and without split-k.
TEST(W3A16Gemm, MatchesCpuReferenceAcrossShapesAndBatches) {
  REQUIRE_GPU();
  const std::vector<Case> cases = {
      {64, 64, 1, false, 0, 0},    {128, 192, 3, false, 0, 0},  {320, 128, 8, true, 0, 0},  {1408, 128, 13, false, 0, 0},
      {192, 1408, 16, false, 0, 0}, {256, 512, 31, true, 0, 0}, {512, 256, 32, false, 0, 0}, {384, 640, 64, false, 0, 0},
      {256, 1024, 1, false, 0, 1}, {256, 1024, 5, false, 0, 16}, {1024, 2048, 2, false, 0, 0}, {2048, 1408, 40, false, 0, 0},
  };
  uint32_t seed = 11;
  for (const Case& c : cases) {
    bool written = false;
    const double err = runCase(c, seed++, &written);
    EXPECT_TRUE(written) << c.n << "x" << c.k << " m=" << c.m;
    EXPECT_LT(err, 3e-3) << c.n << "x" << c.k << " m=" << c.m << (c.symmetric ? " sym" : " asym") << " split " << c.split;
  }
}

TEST(W3A16Gemm, FusedLowRankCompensatorMatchesReference) {
  REQUIRE_GPU();
  // Fused X V^T (m <= 32, rank <= 64; split-k adds each split's share) and the projection-kernel path.
  const std::vector<Case> cases = {{256, 512, 1, false, 32, 0},   {512, 256, 16, false, 16, 0},
                                   {512, 1024, 32, false, 32, 0}, {256, 1024, 8, true, 32, 4},
                                   {512, 1024, 32, false, 64, 0}, {256, 1024, 8, true, 48, 4},
                                   {320, 1024, 33, true, 96, 0},  {1408, 2048, 64, false, 32, 0},
                                   {256, 1024, 4, false, 128, 1}};
  uint32_t seed = 101;
  for (const Case& c : cases) {
    bool written = false;
    const double err = runCase(c, seed++, &written);
    EXPECT_TRUE(written);
    EXPECT_LT(err, 3e-3) << c.n << "x" << c.k << " m=" << c.m << " rank " << c.rank;
  }
}

// Both kernels on the cases the automatic choice does not give them: the streaming kernel without a
// compensator or at m <= 8 (kernel 1), the pipelined kernel with a compensator at m = 9..32 (kernel 2).
TEST(W3A16Gemm, BothKernelsMatchWhereNotChosenByDefault) {
  REQUIRE_GPU();
  const std::vector<Case> cases = {{256, 1024, 1, false, 0, 0, 1},  {320, 640, 8, true, 32, 4, 1},
                                   {1408, 128, 13, false, 0, 0, 1}, {256, 1024, 4, false, 128, 1, 1},
                                   {512, 256, 32, true, 0, 0, 1},   {512, 1024, 16, false, 32, 0, 2},
                                   {256, 1024, 24, true, 32, 4, 2}, {320, 640, 31, true, 0, 0, 2}};
  uint32_t seed = 301;
  for (const Case& c : cases) {
    bool written = false;
    const double err = runCase(c, seed++, &written);
    EXPECT_TRUE(written);
    EXPECT_LT(err, 3e-3) << c.n << "x" << c.k << " m=" << c.m << " rank " << c.rank << " kernel " << c.kernel;
  }
}

TEST(W3A16Gemm, RejectsBadArguments) {
  REQUIRE_GPU();
  W3A16Weights w{reinterpret_cast<void*>(16), reinterpret_cast<void*>(16), nullptr, 100, 64};
  EXPECT_FALSE(w3a16Gemm(reinterpret_cast<void*>(16), w, reinterpret_cast<void*>(16), 1, nullptr,
                         reinterpret_cast<void*>(16), 1 << 30, nullptr).ok());
  w.n = 64;
  EXPECT_FALSE(w3a16Gemm(reinterpret_cast<void*>(16), w, reinterpret_cast<void*>(16), 65, nullptr,
                         reinterpret_cast<void*>(16), 1 << 30, nullptr).ok());
  EXPECT_FALSE(w3a16Gemm(reinterpret_cast<void*>(16), w, reinterpret_cast<void*>(16), 1, nullptr,
                         reinterpret_cast<void*>(16), 16, nullptr).ok());
}

TEST(GpuDevice, DetectionNeverThrows) {
  std::string why;
  const bool ok = deviceAvailable(&why);
  EXPECT_EQ(ok, why.empty()) << why;
  DeviceInfo info;
  EXPECT_EQ(deviceInfo(&info).ok(), ok);
}

}  // namespace

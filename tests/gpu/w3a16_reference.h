// SPDX-License-Identifier: MIT
#pragma once
// The W3A16 GEMM's tests' reference (w3a16_gemm_test.cpp, w3a16_streamk_test.cpp): one call of w3a16Gemm on
// fresh random data (fp16 or bf16 activations, with or without zeros and MiLo's INT3 compensator) against a
// double-precision CPU reference built from the codes and scales, with a poisoned output.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_support.h"
#include "moewb/gpu/int3_layout.h"
#include "moewb/gpu/w3a16.h"

namespace moewb::gpu::test_support {

inline double toDouble(uint16_t bits, W3A16Type type) {
  return type == W3A16Type::Bf16 ? bf16BitsToFloat(bits) : halfBitsToFloat(bits);
}

// An INT3 factor as core stores it (groups of 64 consecutive values, x = (q - 4) * 2s/7) and its
// kernel layout.
struct Int3Factor {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<uint32_t> kw;
  std::vector<uint16_t> ks;
  double value(int64_t r, int64_t c) const {
    const int64_t i = r * cols + c;
    return (double(codes[size_t(i)]) - 4.0) * 2.0 * scales[size_t(i / 64)] / 7.0;
  }
};
inline Int3Factor makeInt3Factor(int64_t rows, int64_t cols, int64_t pad_rows, int64_t pad_cols, W3A16Type type,
                                 std::mt19937& rng) {
  Int3Factor f;
  f.rows = rows;
  f.cols = cols;
  f.codes.resize(size_t(rows * cols));
  for (auto& c : f.codes) c = uint8_t(rng() & 7);
  std::uniform_real_distribution<float> sd(0.01f, 0.05f);
  f.scales.resize(size_t((rows * cols + 63) / 64));
  for (auto& s : f.scales) s = halfBitsToFloat(floatToHalfBits(sd(rng)));
  f.kw.resize(size_t(int3Words(pad_rows, pad_cols)));
  f.ks.resize(size_t(groupCount(pad_rows, pad_cols)));
  const Status s = packInt3FactorToW3A16(f.codes.data(), f.scales.data(), rows, cols, 64, pad_rows, pad_cols, type,
                                         f.kw.data(), f.ks.data());
  EXPECT_TRUE(s.ok()) << s.message;
  return f;
}

struct GemmCase {
  int64_t n, k, m;
  bool symmetric;
  int rank;  // INT3 compensator (0: none)
  W3A16Type type = W3A16Type::Fp16;
  int ctas = 0;  // W3A16Config::ctas (0: the kernel's choice)
};

inline std::string describe(const GemmCase& c) {
  return std::to_string(c.n) + "x" + std::to_string(c.k) + " m=" + std::to_string(c.m) + (c.symmetric ? " sym" : " asym") +
         " rank " + std::to_string(c.rank) + (c.type == W3A16Type::Bf16 ? " bf16" : " fp16") + " ctas " + std::to_string(c.ctas);
}

// Normalised error of w3a16Gemm's Y against the reference; calls it twice on one scratch (the first call
// must leave the scratch clean) with a fresh NaN-poisoned output each time.
inline double runGemmCase(const GemmCase& c, uint32_t seed, bool* all_written) {
  std::mt19937 rng(seed);
  const int64_t n = c.n, k = c.k, m = c.m, groups = groupCount(n, k);
  const RandomInt3Weight weight = randomInt3Weight(n, k, c.symmetric, rng);
  const auto& [codes, scales, zeros] = weight;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint32_t> kw(static_cast<size_t>(int3Words(n, k)));
  std::vector<uint16_t> ks(static_cast<size_t>(groups)), kb(static_cast<size_t>(groups));
  EXPECT_TRUE(packCodesToW3A16(codes.data(), scales.data(), c.symmetric ? nullptr : zeros.data(), n, k, kw.data(),
                               ks.data(), kb.data(), c.type).ok());
  std::vector<uint16_t> x(static_cast<size_t>(m * k));
  for (auto& e : x) e = floatToTypeBits(nd(rng), c.type);

  const int64_t u_cols = (c.rank + 63) / 64 * 64, v_rows = c.rank <= 64 ? 64 : 128;
  Int3Factor u, v;
  if (c.rank) {
    u = makeInt3Factor(n, c.rank, n, u_cols, c.type, rng);
    v = makeInt3Factor(c.rank, k, v_rows, k, c.type, rng);
  }
  DeviceBuffer<uint32_t> dw(kw), duw(u.kw), dvw(v.kw);
  DeviceBuffer<uint16_t> ds(ks), db(kb), dx(x), dus(u.ks), dvs(v.ks), dy(std::vector<uint16_t>(size_t(m * n)));
  const int64_t ws_bytes = w3a16WorkspaceBytes(n);
  DeviceBuffer<char> ws(std::vector<char>(size_t(ws_bytes), 0));
  W3A16Weights w{dw.p, ds.p, c.symmetric ? nullptr : db.p, n, k, c.type};
  LowRankCompensator comp;
  comp.rank = c.rank;
  comp.u3 = {duw.p, dus.p, nullptr, n, u_cols, c.type};
  comp.v3 = {dvw.p, dvs.p, nullptr, v_rows, k, c.type};
  W3A16Config cfg;
  cfg.ctas = c.ctas;
  std::vector<uint16_t> y(static_cast<size_t>(m * n));
  for (int rep = 0; rep < 2; ++rep) {
    EXPECT_EQ(cudaMemset(dy.p, 0xFF, size_t(m * n) * 2), cudaSuccess);  // NaN in fp16 and bf16
    const Status s = w3a16Gemm(dx.p, w, dy.p, m, c.rank ? &comp : nullptr, ws.p, ws_bytes, nullptr, c.ctas ? &cfg : nullptr);
    EXPECT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(y.data(), dy.p, y.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  std::vector<double> t(size_t(m * c.rank), 0.0);  // X V^T
  for (int64_t mm = 0; mm < m; ++mm)
    for (int j = 0; j < c.rank; ++j)
      for (int64_t cc = 0; cc < k; ++cc) t[size_t(mm * c.rank + j)] += toDouble(x[size_t(mm * k + cc)], c.type) * v.value(j, cc);
  double num = 0, den = 0;
  *all_written = true;
  for (int64_t row = 0; row < n; ++row)
    for (int64_t mm = 0; mm < m; ++mm) {
      double ref = 0;
      for (int64_t cc = 0; cc < k; ++cc) ref += weight.value(k, row, cc) * toDouble(x[size_t(mm * k + cc)], c.type);
      for (int j = 0; j < c.rank; ++j) ref += t[size_t(mm * c.rank + j)] * u.value(row, j);
      const double got = toDouble(y[size_t(mm * n + row)], c.type);
      if (!std::isfinite(got)) *all_written = false;
      num += (got - ref) * (got - ref);
      den += ref * ref;
    }
  return std::sqrt(num / den);
}

// fp16 rounds X, the decoded weights and Y to 11 bits (~4e-4 seen); bf16 to 8 bits (~4e-3 seen).
inline double gemmTolerance(W3A16Type type) { return type == W3A16Type::Bf16 ? 1.5e-2 : 3e-3; }

// Every case writes all of Y and stays within the type's tolerance; case i draws its data from seed + i.
inline void expectGemmCasesMatch(const std::vector<GemmCase>& cases, uint32_t seed) {
  for (const GemmCase& c : cases) {
    bool written = false;
    const double err = runGemmCase(c, seed++, &written);
    EXPECT_TRUE(written) << describe(c);
    EXPECT_LT(err, gemmTolerance(c.type)) << describe(c);
  }
}

}  // namespace moewb::gpu::test_support

// SPDX-License-Identifier: MIT
// The stream-K W3A16 kernel (the one kernel behind w3a16Gemm): its shape classes, CTA counts and sums across
// CTAs, fp16 and bf16 activations, MiLo's INT3 low-rank compensator, against a double-precision CPU
// reference built from the codes and scales, on fresh random data with a poisoned output (w3a16_reference.h).
// Skips without a usable GPU; the work split's checks run on the host.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "moewb/gpu/device.h"
#include "moewb/gpu/int3_layout.h"
#include "moewb/gpu/w3a16.h"
#include "gpu_test_support.h"
#include "w3a16_reference.h"
#include "w3a16_streamk_balance.h"

namespace {

using namespace moewb::gpu;

template <typename T>
using Dev = test_support::DeviceBuffer<T>;

using test_support::GemmCase;
using Case = GemmCase;

double tolerance(W3A16Type type) { return test_support::gemmTolerance(type); }
void expectCasesMatch(const std::vector<Case>& cases, uint32_t seed) { test_support::expectGemmCasesMatch(cases, seed); }

// Shape classes of the kernel: ranges inside one pair of strips and across pairs (few and many CTAs),
// an odd number of strips (a half-empty last pair), k with a partial last chunk of groups (k/64 not a
// multiple of 4), every batch tile (1, 2, 4, 8 n8 tiles, partially used), symmetric and asymmetric groups
// on each of the three decoders (m <= 8, 9..16 and 33..64, 17..32), and the m = 1 flush by warp.
TEST(W3A16StreamK, MatchesCpuReferenceForFp16AndBf16) {
  REQUIRE_GPU();
  const auto f16 = W3A16Type::Fp16, b16 = W3A16Type::Bf16;
  const std::vector<Case> cases = {
      {64, 64, 1, false, 0, f16},     {192, 320, 3, true, 0, f16},     {320, 1408, 8, false, 0, b16, 7},
      {1408, 128, 13, false, 0, f16}, {256, 1024, 16, true, 0, b16},   {512, 704, 31, false, 0, f16, 3},
      {384, 640, 33, false, 0, b16},  {256, 512, 64, false, 0, f16},   {1024, 2048, 1, false, 0, b16, 1},
      {2048, 1408, 5, true, 0, f16},  {256, 768, 20, true, 0, f16},    {384, 512, 24, true, 0, b16},
      // more CTAs than the launcher tabulates ranges for: each CTA computes its own range
      {4096, 4096, 3, true, 0, f16, 500},
      // fp16 sums across CTAs are counted words at m <= 8, and at m = 9..16 with three units or more per
      // CTA, where at most 31 CTAs share a pair (m = 1, 13 and 16 here; 40 at m = 40 take the fp32 sums)
      {1024, 4096, 1, true, 0, f16, 16},  {768, 2048, 1, false, 0, f16, 5},  {512, 8192, 13, true, 0, f16, 32},
      {512, 8192, 40, false, 0, f16, 64},
      // 40 CTAs share one pair: fp32 sums and arrival counters, at m = 1 with three units or more per CTA the
      // warps flushing on their own (kWarpFlush)
      {128, 10240, 4, false, 0, f16, 40}, {128, 32768, 1, true, 0, f16, 40},
  };
  expectCasesMatch(cases, 7001);
}

// MiLo's INT3 U and V: V streamed as one more pair, T = X V^T completed once, T U^T added by whichever CTA
// finishes a pair, computed ahead (while its arrivals are in flight) where the CTA has at most three pairs
// pending, else after them (512x256: one CTA, four pairs); ranks 16..128 (V padded to 64 or 128 rows, U to
// 64 or 128 columns).
TEST(W3A16StreamK, Int3CompensatorMatchesReference) {
  REQUIRE_GPU();
  const auto f16 = W3A16Type::Fp16, b16 = W3A16Type::Bf16;
  const std::vector<Case> cases = {
      {256, 512, 1, false, 32, f16},     {512, 256, 16, true, 16, f16},    {320, 1024, 32, false, 64, b16},
      {256, 1024, 8, false, 128, f16},   {1408, 704, 4, false, 32, b16},   {512, 1024, 64, true, 32, f16},
      {256, 2048, 2, false, 32, f16, 2}, {192, 512, 9, false, 16, f16, 40}, {512, 7168, 16, false, 32, b16},
      {320, 4096, 9, false, 128, f16},   {384, 4096, 1, true, 64, f16},
  };
  expectCasesMatch(cases, 8001);
}

TEST(W3A16StreamK, RejectsMismatchedCompensator) {
  REQUIRE_GPU();
  void* any = reinterpret_cast<void*>(256);
  W3A16Weights w{any, any, nullptr, 128, 256, W3A16Type::Bf16};
  const int64_t ws = w3a16WorkspaceBytes(128);
  LowRankCompensator comp;
  comp.rank = 32;
  comp.u3 = {any, any, nullptr, 128, 64, W3A16Type::Bf16};
  comp.v3 = {any, any, nullptr, 32, 256, W3A16Type::Bf16};  // V must be padded to 64 rows
  const Status bad_v = w3a16Gemm(any, w, any, 1, &comp, any, ws, nullptr);
  EXPECT_FALSE(bad_v.ok());
  EXPECT_NE(bad_v.message.find("V 32x256"), std::string::npos) << bad_v.message;
  comp.v3.n = 64;
  comp.u3.type = W3A16Type::Fp16;  // U in another type than the weights
  EXPECT_FALSE(w3a16Gemm(any, w, any, 1, &comp, any, ws, nullptr).ok());
  LowRankCompensator missing;  // a rank without its INT3 factors
  missing.rank = 32;
  const Status no_factors = w3a16Gemm(any, w, any, 1, &missing, any, ws, nullptr);
  EXPECT_FALSE(no_factors.ok());
  EXPECT_NE(no_factors.message.find("INT3"), std::string::npos) << no_factors.message;
}

// Calls on one scratch with different grids, in turn (counted words and fp32 sums with arrival counters, one
// CTA per pair and many), each leave it clean for the next: the same Y each time, to fp32 rounding.
TEST(W3A16StreamK, CallsOfAnyGridShareOneScratch) {
  REQUIRE_GPU();
  std::mt19937 rng(9001);
  const int64_t n = 512, k = 1024, m = 4;
  std::vector<uint8_t> codes(static_cast<size_t>(n * k));
  for (auto& v : codes) v = uint8_t(rng() & 7);
  std::vector<uint16_t> scales(size_t(groupCount(n, k)), floatToHalfBits(0.01f)), zeros(scales.size(), floatToHalfBits(3.f));
  std::vector<uint32_t> kw(static_cast<size_t>(int3Words(n, k)));
  std::vector<uint16_t> ks(scales.size()), kb(scales.size());
  ASSERT_TRUE(packCodesToW3A16(codes.data(), scales.data(), zeros.data(), n, k, kw.data(), ks.data(), kb.data()).ok());
  std::vector<uint16_t> x(static_cast<size_t>(m * k));
  std::normal_distribution<float> nd;
  for (auto& e : x) e = floatToHalfBits(nd(rng));
  Dev<uint32_t> dw(kw);
  Dev<uint16_t> ds(ks), db(kb), dx(x), dy(std::vector<uint16_t>(size_t(m * n)));
  const int64_t ws_bytes = w3a16WorkspaceBytes(n);
  Dev<char> ws(std::vector<char>(size_t(ws_bytes), 0));
  W3A16Weights w{dw.p, ds.p, db.p, n, k};
  std::vector<std::vector<uint16_t>> outs;
  for (int ctas : {0, 40, 0, 1, 7, 0}) {
    W3A16Config cfg;
    cfg.ctas = ctas;
    ASSERT_EQ(cudaMemset(dy.p, 0xFF, size_t(m * n) * 2), cudaSuccess);
    ASSERT_TRUE(w3a16Gemm(dx.p, w, dy.p, m, nullptr, ws.p, ws_bytes, nullptr, &cfg).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> y(static_cast<size_t>(m * n));
    ASSERT_EQ(cudaMemcpy(y.data(), dy.p, y.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    outs.push_back(y);
  }
  // Sums in different orders: equal to a few fp16 ulps, never a leftover partial sum.
  for (size_t i = 1; i < outs.size(); ++i)
    for (size_t j = 0; j < outs[0].size(); ++j) {
      const double a = halfBitsToFloat(outs[0][j]), b = halfBitsToFloat(outs[i][j]);
      ASSERT_TRUE(std::isfinite(b));
      ASSERT_NEAR(a, b, 2e-3 * (1.0 + std::fabs(a))) << "call " << i << " element " << j;
    }
}

// Y at an odd element offset (not 8-byte aligned): the kernel stores four outputs at once only where Y
// allows it, so the same product lands one element later, with the elements around it untouched.
TEST(W3A16StreamK, WritesYAtAnyElementOffset) {
  REQUIRE_GPU();
  std::mt19937 rng(9101);
  const int64_t n = 384, k = 512, m = 3;
  const test_support::RandomInt3Weight weight = test_support::randomInt3Weight(n, k, false, rng);
  std::vector<uint32_t> kw(static_cast<size_t>(int3Words(n, k)));
  std::vector<uint16_t> ks(size_t(groupCount(n, k))), kb(ks.size());
  ASSERT_TRUE(packCodesToW3A16(weight.codes.data(), weight.scales.data(), weight.zeros.data(), n, k, kw.data(), ks.data(),
                               kb.data()).ok());
  std::vector<uint16_t> x(static_cast<size_t>(m * k));
  std::normal_distribution<float> nd;
  for (auto& e : x) e = floatToHalfBits(nd(rng));
  const uint16_t sentinel = 0x7BFF;  // fp16 65504: no product of this data comes near it
  Dev<uint32_t> dw(kw);
  Dev<uint16_t> ds(ks), db(kb), dx(x), dy(std::vector<uint16_t>(size_t(m * n + 2), sentinel));
  const int64_t ws_bytes = w3a16WorkspaceBytes(n);
  Dev<char> ws(std::vector<char>(size_t(ws_bytes), 0));
  W3A16Weights w{dw.p, ds.p, db.p, n, k};
  std::vector<std::vector<uint16_t>> outs;
  for (int64_t offset : {0, 1}) {  // elements
    ASSERT_EQ(cudaMemcpy(dy.p, std::vector<uint16_t>(size_t(m * n + 2), sentinel).data(), size_t(m * n + 2) * 2,
                         cudaMemcpyHostToDevice), cudaSuccess);
    const Status s = w3a16Gemm(dx.p, w, dy.p + offset, m, nullptr, ws.p, ws_bytes, nullptr);
    ASSERT_TRUE(s.ok()) << s.message;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> y(size_t(m * n + 2));
    ASSERT_EQ(cudaMemcpy(y.data(), dy.p, y.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int64_t i = 0; i < int64_t(y.size()); ++i)
      if (i < offset || i >= offset + m * n) EXPECT_EQ(y[size_t(i)], sentinel) << "offset " << offset << " element " << i;
    outs.emplace_back(y.begin() + offset, y.begin() + offset + m * n);
  }
  for (size_t j = 0; j < outs[0].size(); ++j) {  // fp32 sums in possibly different orders
    const double a = halfBitsToFloat(outs[0][j]), b = halfBitsToFloat(outs[1][j]);
    ASSERT_TRUE(std::isfinite(b)) << "element " << j;
    ASSERT_NE(outs[1][j], sentinel) << "element " << j;
    ASSERT_NEAR(a, b, 2e-3 * (1.0 + std::fabs(a))) << "element " << j;
  }
}

// fp16 without a compensator: Y of one call, on a shape whose pairs 8 or 9 CTAs share (counted sums).
struct CountedCall {
  int64_t n = 512, k = 8192, m = 16;
  std::vector<uint16_t> x;
  test_support::RandomInt3Weight weight;
  std::vector<uint32_t> kw;
  std::vector<uint16_t> ks, kb;
  explicit CountedCall(uint32_t seed) {
    std::mt19937 rng(seed);
    weight = test_support::randomInt3Weight(n, k, false, rng);
    kw.resize(size_t(int3Words(n, k)));
    ks.resize(size_t(groupCount(n, k)));
    kb.resize(ks.size());
    EXPECT_TRUE(packCodesToW3A16(weight.codes.data(), weight.scales.data(), weight.zeros.data(), n, k, kw.data(),
                                 ks.data(), kb.data()).ok());
    x.resize(size_t(m * k));
    std::normal_distribution<float> nd;
    for (auto& e : x) e = floatToHalfBits(nd(rng));
  }
  double reference(int64_t mm, int64_t row) const {
    double ref = 0;
    for (int64_t c = 0; c < k; ++c) ref += weight.value(k, row, c) * halfBitsToFloat(x[size_t(mm * k + c)]);
    return ref;
  }
  // `calls` calls on one scratch, each into a NaN-poisoned Y; the Y of each.
  std::vector<std::vector<uint16_t>> run(int calls) const {
    Dev<uint32_t> dw(kw);
    Dev<uint16_t> ds(ks), db(kb), dx(x), dy(std::vector<uint16_t>(size_t(m * n)));
    const int64_t ws_bytes = w3a16WorkspaceBytes(n);
    Dev<char> ws(std::vector<char>(size_t(ws_bytes), 0));
    W3A16Weights w{dw.p, ds.p, db.p, n, k};
    W3A16Config cfg;
    cfg.ctas = 32;  // 32 CTAs: 4 units each (counted sums at m = 16), 8 or 9 per pair of strips
    std::vector<std::vector<uint16_t>> ys;
    for (int call = 0; call < calls; ++call) {
      EXPECT_EQ(cudaMemset(dy.p, 0xFF, size_t(m * n) * 2), cudaSuccess);
      const Status s = w3a16Gemm(dx.p, w, dy.p, m, nullptr, ws.p, ws_bytes, nullptr, &cfg);
      EXPECT_TRUE(s.ok()) << s.message;
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ys.emplace_back(size_t(m * n));
      EXPECT_EQ(cudaMemcpy(ys.back().data(), dy.p, ys.back().size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return ys;
  }
};

// Counted sums are integers: Y is the same, bit for bit, whatever order the CTAs' atomics land in (fp32
// atomics gave sums in a different order each call), and matches the reference.
TEST(W3A16StreamK, Fp16SumsAcrossCtasAreRepeatable) {
  REQUIRE_GPU();
  const CountedCall call(9201);
  const auto ys = call.run(4);
  for (size_t i = 1; i < ys.size(); ++i) ASSERT_EQ(ys[i], ys[0]) << "call " << i;
  double num = 0, den = 0;
  for (int64_t mm = 0; mm < call.m; ++mm)
    for (int64_t row = 0; row < call.n; ++row) {
      const double ref = call.reference(mm, row), got = halfBitsToFloat(ys[0][size_t(mm * call.n + row)]);
      num += (got - ref) * (got - ref);
      den += ref * ref;
    }
  EXPECT_LT(std::sqrt(num / den), tolerance(W3A16Type::Fp16));
}

// An infinite activation makes its batch row's outputs non-finite (NaN where a shared pair's word was
// poisoned, inf or NaN where one CTA summed the pair), and no other row's.
TEST(W3A16StreamK, NonFiniteActivationsStayInTheirBatchRow) {
  REQUIRE_GPU();
  CountedCall call(9301);
  const int64_t bad_row = 5;
  call.x[size_t(bad_row * call.k + 3000)] = 0x7C00;  // +inf
  const auto ys = call.run(2);  // the second call: the first left the scratch clean
  double num = 0, den = 0;
  for (int64_t mm = 0; mm < call.m; ++mm)
    for (int64_t row = 0; row < call.n; ++row) {
      const double got = halfBitsToFloat(ys[1][size_t(mm * call.n + row)]);
      if (mm == bad_row) {
        ASSERT_FALSE(std::isfinite(got)) << "row " << row;
        continue;
      }
      ASSERT_TRUE(std::isfinite(got)) << "batch row " << mm << ", row " << row;
      const double ref = call.reference(mm, row);
      num += (got - ref) * (got - ref);
      den += ref * ref;
    }
  EXPECT_LT(std::sqrt(num / den), tolerance(W3A16Type::Fp16));
}

// The CTAs' ranges (split by cost: units plus flushes, V's units first with a compensator) must cover
// every weight unit exactly once, in order, for any shape and grid; no CTA may take more than its share
// of the cost plus two units (a wrong split would leave units out or give one CTA several shares), nor
// more iterations than the bound the kernel sizes its lists by, nor, where the split puts the iterations
// first (m <= 16), more than ceil(iterations / grid): there the flushes' charges may shift units between
// CTAs only within that (one iteration more for a CTA measured as a whole iteration on the call).
// Host-side: runs without a GPU.
TEST(W3A16StreamKBalance, RangesPartitionTheUnitsAndFollowTheCost) {
  namespace sk = moewb::gpu::detail;
  for (int n : {64, 128, 192, 1408, 2048, 4096, 6400, 14336, 128000})
    for (int k : {64, 256, 320, 1408, 4096, 14336, 65536})
      for (int grid_limit : {1, 7, 132, 264})
        for (const int rank : {0, 32, 64})  // V's units cost less at rank <= 32
          for (const bool iterations_first : {false, true}) {
            const bool comp = rank > 0;
            const int pairs = (n / 64 + 1) / 2, chunks = (k / 64 + 3) / 4, units = pairs * chunks;
            const int grid = std::min(grid_limit, units);
            const int flush_cost = sk::streamKFlushCost(units, grid);
            const sk::StreamKSplit s =
                sk::streamKSplitFor(units, chunks, pairs, grid, flush_cost, comp, rank <= 32, iterations_first);
            const int iterations = units + (comp ? chunks : 0), most_iterations = (iterations + grid - 1) / grid;
            const std::string where = std::to_string(n) + "x" + std::to_string(k) + " grid " + std::to_string(s.grid) +
                                      (comp ? " with compensator rank " + std::to_string(rank) : "") +
                                      (iterations_first ? ", iterations first" : "");
            ASSERT_EQ(sk::streamKWeightStart(s, 0), 0) << where;
            ASSERT_EQ(sk::streamKWeightStart(s, s.grid), s.units) << where;
            const double unit = sk::kUnitCost, flush = s.first_extra;
            const double v_unit = s.v_unit_cost, v_cost = comp ? v_unit * s.chunks : 0.0;
            const double share = (unit * s.units + flush * s.pairs + v_cost) / s.grid;
            for (int c = 0; c < s.grid; ++c) {
              const int u0 = sk::streamKWeightStart(s, c), u1 = sk::streamKWeightStart(s, c + 1);
              ASSERT_LE(u0, u1) << where << ", CTA " << c;
              const int v_units = sk::vUnitsOf(s, c);
              // The kernel sizes its lists of pending arrivals by this bound (one flush per iteration at most).
              EXPECT_LE(u1 - u0 + v_units, sk::streamKMaxIterations(s)) << where << ", CTA " << c;
              if (iterations_first) EXPECT_LE(u1 - u0 + v_units, most_iterations) << where << ", CTA " << c;
              const int pairs_touched = u1 > u0 ? (u1 - 1) / s.chunks - u0 / s.chunks + 1 : 0;
              const double cost = unit * (u1 - u0) + flush * pairs_touched + v_unit * v_units;
              EXPECT_LE(cost, share + 2 * (unit + flush)) << where << ", CTA " << c;
            }
          }
}

}  // namespace


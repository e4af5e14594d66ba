// SPDX-License-Identifier: MIT
// The W3A16 GEMM's one entry point, w3a16Gemm, with its own choices (no W3A16Config, unless a case asks for
// a number of CTAs) against a double-precision CPU reference over a sweep of shapes and batch sizes, with and
// without zeros and MiLo's INT3 low-rank compensator (w3a16_reference.h). Skips without a usable GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_test_support.h"
#include "moewb/gpu/device.h"
#include "moewb/gpu/int3_layout.h"
#include "moewb/gpu/w3a16.h"
#include "w3a16_reference.h"

namespace {

using namespace moewb::gpu;
using test_support::GemmCase;

// Every shape class (one or several CTAs per pair of strips, an odd number of strips, long k, k with a
// partial last chunk of groups), every batch tile (1, 2, 4, 8 n8 tiles, partially used), one CTA and many.
TEST(W3A16Gemm, MatchesCpuReferenceAcrossShapesAndBatches) {
  REQUIRE_GPU();
  const auto f16 = W3A16Type::Fp16;
  const std::vector<GemmCase> cases = {
      {64, 64, 1, false, 0, f16},     {128, 192, 3, false, 0, f16},    {320, 128, 8, true, 0, f16},
      {1408, 128, 13, false, 0, f16}, {192, 1408, 16, false, 0, f16},  {256, 512, 31, true, 0, f16},
      {512, 256, 32, false, 0, f16},  {384, 640, 64, false, 0, f16},   {256, 1024, 1, false, 0, f16, 1},
      {256, 1024, 5, false, 0, f16, 16}, {1024, 2048, 2, false, 0, f16}, {2048, 1408, 40, false, 0, f16},
  };
  test_support::expectGemmCasesMatch(cases, 11);
}

// The same entry point with bf16 activations (the scales and biases in bf16).
TEST(W3A16Gemm, MatchesCpuReferenceInBf16) {
  REQUIRE_GPU();
  const auto b16 = W3A16Type::Bf16;
  const std::vector<GemmCase> cases = {
      {64, 64, 1, false, 0, b16}, {320, 640, 8, true, 0, b16}, {1408, 128, 13, false, 0, b16},
      {512, 1024, 32, false, 0, b16}, {384, 640, 64, true, 0, b16},
  };
  test_support::expectGemmCasesMatch(cases, 201);
}

// The fused compensator (INT3 U and V) at ranks 16..128 (V padded to 64 or 128 rows, U to 64 or 128
// columns), every batch tile, symmetric and asymmetric weights, the kernel's grid and forced ones.
TEST(W3A16Gemm, FusedLowRankCompensatorMatchesReference) {
  REQUIRE_GPU();
  const auto f16 = W3A16Type::Fp16, b16 = W3A16Type::Bf16;
  const std::vector<GemmCase> cases = {
      {256, 512, 1, false, 32, f16},    {512, 256, 16, false, 16, f16},  {512, 1024, 32, false, 32, f16},
      {256, 1024, 8, true, 32, f16, 4}, {512, 1024, 32, false, 64, f16}, {256, 1024, 8, true, 16, f16, 4},
      {320, 1024, 33, true, 128, f16},  {1408, 2048, 64, false, 32, f16}, {256, 1024, 4, false, 128, f16, 1},
      {512, 2048, 24, false, 64, b16},
  };
  test_support::expectGemmCasesMatch(cases, 101);
}

TEST(W3A16Gemm, RejectsBadArguments) {
  REQUIRE_GPU();
  void* any = reinterpret_cast<void*>(256);
  W3A16Weights w{any, any, nullptr, 100, 64};
  EXPECT_FALSE(w3a16Gemm(any, w, any, 1, nullptr, any, 1 << 30, nullptr).ok()) << "n not a multiple of 64";
  w.n = 64;
  EXPECT_FALSE(w3a16Gemm(any, w, any, 65, nullptr, any, 1 << 30, nullptr).ok()) << "m above 64";
  EXPECT_FALSE(w3a16Gemm(any, w, any, 1, nullptr, any, 16, nullptr).ok()) << "scratch too small";
  LowRankCompensator comp;
  comp.rank = 24;  // not a multiple of 16
  EXPECT_FALSE(w3a16Gemm(any, w, any, 1, &comp, any, 1 << 30, nullptr).ok()) << "rank 24";
  comp.rank = 144;
  EXPECT_FALSE(w3a16Gemm(any, w, any, 1, &comp, any, 1 << 30, nullptr).ok()) << "rank 144";
}

// The number of CTAs the report shows: the kernel's own (one wave of resident CTAs, at most one per work
// unit of 2 strips x 4 groups) or the asked number, also at most one per unit. Needs the device's SM count.
TEST(W3A16Gemm, CtasAreOneWaveOrAsked) {
  REQUIRE_GPU();
  EXPECT_EQ(w3a16Ctas(1, 128, 256, nullptr), 1) << "one work unit";
  const int wave = w3a16Ctas(1, 14336, 4096, nullptr);
  EXPECT_GT(wave, 1);
  EXPECT_LE(wave, 112 * 16) << "at most one CTA per unit";
  W3A16Config cfg;
  cfg.ctas = 40;
  EXPECT_EQ(w3a16Ctas(1, 14336, 4096, &cfg), 40);
  EXPECT_EQ(w3a16Ctas(1, 128, 512, &cfg), 2) << "at most one CTA per unit";
}

TEST(GpuDevice, DetectionNeverThrows) {
  std::string why;
  const bool ok = deviceAvailable(&why);
  EXPECT_EQ(ok, why.empty()) << why;
  DeviceInfo info;
  EXPECT_EQ(deviceInfo(&info).ok(), ok);
}

}  // namespace

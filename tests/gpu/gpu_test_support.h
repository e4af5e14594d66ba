// SPDX-License-Identifier: MIT
#pragma once
// Shared by the GPU tests: skip without a usable GPU, and a device buffer that frees itself.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "moewb/gpu/device.h"
#include "moewb/gpu/int3_layout.h"

// Skips the test (with the reason) when no usable CUDA device is there.
#define REQUIRE_GPU()                                                          \
  do {                                                                         \
    std::string why;                                                           \
    if (!moewb::gpu::deviceAvailable(&why)) GTEST_SKIP() << "no GPU: " << why; \
  } while (0)

namespace moewb::gpu::test_support {

template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t n) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess); }
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size()) { put(v); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(p); }
  void put(const std::vector<T>& v) {
    EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> get(size_t n) const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

// A random n x k INT3 weight in core's terms: codes 0..7, fp16 scales in [0.002, 0.03] and zeros in
// [0.5, 6.5] (4 for the symmetric variant), one per row and group of 64; drawn in that order from rng.
struct RandomInt3Weight {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales, zeros;
  // The dequantised weight (code - zero) * scale at (row, col) of the n x k matrix, in double: the
  // kernels' tests' reference.
  double value(int64_t k, int64_t row, int64_t col) const {
    const size_t group = size_t(row * (k / 64) + col / 64);
    return (double(codes[size_t(row * k + col)]) - halfBitsToFloat(zeros[group])) * halfBitsToFloat(scales[group]);
  }
};
inline RandomInt3Weight randomInt3Weight(int64_t n, int64_t k, bool symmetric, std::mt19937& rng) {
  RandomInt3Weight w;
  w.codes.resize(static_cast<size_t>(n * k));
  for (auto& v : w.codes) v = uint8_t(rng() & 7);
  std::uniform_real_distribution<float> sd(0.002f, 0.03f), zd(0.5f, 6.5f);
  w.scales.resize(static_cast<size_t>(groupCount(n, k)));
  w.zeros.resize(w.scales.size());
  for (auto& s : w.scales) s = floatToHalfBits(sd(rng));
  for (auto& z : w.zeros) z = floatToHalfBits(symmetric ? 4.0f : zd(rng));
  return w;
}

}  // namespace moewb::gpu::test_support

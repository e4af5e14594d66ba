// SPDX-License-Identifier: MIT
#pragma once
// Shared by the GPU tests: skip without a usable GPU, and a device buffer that frees itself.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "moewb/gpu/device.h"

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

}  // namespace moewb::gpu::test_support

// SPDX-License-Identifier: MIT
#pragma once
// Device memory of the device engine: owned buffers that grow on demand, and one place that turns a
// failed CUDA or cuBLAS call into a moewb::Error naming the step.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "moewb/error.h"

namespace moewb::gpu::device_engine {

inline void cudaCheck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(fmt::format("cuda engine: {} failed: {}", what, cudaGetErrorString(e)));
}
inline void cublasCheck(cublasStatus_t e, const char* what) {
  if (e != CUBLAS_STATUS_SUCCESS)
    throw Error(fmt::format("cuda engine: {} failed: {}", what, cublasGetStatusString(e)));
}

// An owned device allocation. grow() keeps the pointer when the buffer is already large enough, so
// scratch buffers reach their size on the first batch and are reused after it.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) { grow(bytes); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void grow(std::size_t bytes) {
    if (bytes <= bytes_) return;
    release();
    if (bytes == 0) return;
    const cudaError_t e = cudaMalloc(&ptr_, bytes);
    if (e != cudaSuccess) {
      ptr_ = nullptr;
      cudaGetLastError();  // clear the sticky-free error state of a failed allocation
      throw Error(fmt::format("cuda engine: allocating {:.1f} MiB of GPU memory failed: {}", bytes / 1048576.0,
                              cudaGetErrorString(e)));
    }
    bytes_ = bytes;
  }
  void release() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T = void>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Page-locked host memory: device-to-host copies into it run asynchronously and at full speed.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  template <typename T>
  T* get(int64_t count) {
    const std::size_t bytes = static_cast<std::size_t>(std::max<int64_t>(count, 1)) * sizeof(T);
    if (bytes > bytes_) {
      if (ptr_) cudaFreeHost(ptr_);
      ptr_ = nullptr;
      bytes_ = 0;
      cudaCheck(cudaMallocHost(&ptr_, bytes), "allocating page-locked host memory");
      bytes_ = bytes;
    }
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// A buffer of `count` elements of T, grown on demand.
template <typename T>
T* scratch(DeviceBuffer& b, int64_t count) {
  b.grow(static_cast<std::size_t>(count) * sizeof(T));
  return b.as<T>();
}

}  // namespace moewb::gpu::device_engine

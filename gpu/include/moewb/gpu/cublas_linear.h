// SPDX-License-Identifier: MIT
#pragma once
// y = x w^T (+ bias) with cuBLAS for operands that live in host memory: the GEMM of the inference
// engine's CUDA path (moewb::gpu::CublasLinearBackend wraps it for the engine). No CUDA types here.
//
// Every call uploads its weight matrix: the engine streams a model one matrix at a time from the
// checkpoint, so nothing stays resident on the GPU between calls and a model larger than GPU memory runs.
// Device buffers only ever hold one call's operands; they grow to the largest call seen and are reused.
#include <cstdint>
#include <memory>

#include "moewb/gpu/device.h"

namespace moewb::gpu {

struct CublasLinearOptions {
  // TF32 tensor cores (10-bit mantissa products, ~1e-3 relative error per GEMM) instead of exact float32
  // FMA. Off by default: the engine measures models, and its float32 results must match the CPU's.
  bool tf32 = false;
  // Bytes of each of the two pinned staging buffers. Host copies into one overlap the DMA from the other;
  // 8 MiB transfers are long enough to run near the PCIe peak and short enough to pipeline a 1 MB matrix.
  int64_t staging_bytes = int64_t{8} << 20;
};

// What the GPU moved and computed since creation.
struct CublasLinearCounters {
  int64_t calls = 0;
  int64_t uploaded_bytes = 0, downloaded_bytes = 0;
  double flops = 0;
};

// One cuBLAS handle, one stream, two pinned staging buffers and the device buffers, on the device that
// is current when create() runs. Not thread-safe: callers serialise (CublasLinearBackend holds a mutex).
class CublasLinear {
 public:
  // Fails with the reason (e.g. "no CUDA device found", "driver version is insufficient") when no usable
  // device is present; never aborts.
  static Status create(const CublasLinearOptions& options, std::unique_ptr<CublasLinear>* out);
  ~CublasLinear();
  CublasLinear(const CublasLinear&) = delete;
  CublasLinear& operator=(const CublasLinear&) = delete;

  // y[n, out] = x[n, in] * w[out, in]^T (+ bias[out]); all host pointers, float32, row-major, bias may be
  // null. Synchronous: y is complete when it returns. Dimensions must fit cuBLAS's int arguments. A
  // failed device allocation returns code 2 (cudaErrorMemoryAllocation) and leaves the object usable.
  Status linear(const float* x, int64_t n, const float* w, int64_t out, int64_t in, const float* bias,
                float* y);

  // Frees the device buffers (they grow back on the next call); the staging buffers stay.
  void releaseDeviceBuffers();

  const CublasLinearCounters& counters() const;
  const CublasLinearOptions& options() const;

 private:
  CublasLinear();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The CUDA error code of a failed device allocation (cudaErrorMemoryAllocation), for callers that fall
// back to the CPU when one matrix does not fit.
inline constexpr int kCudaOutOfMemory = 2;

}  // namespace moewb::gpu

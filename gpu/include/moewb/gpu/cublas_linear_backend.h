// SPDX-License-Identifier: MIT
#pragma once
// The inference engine's CUDA path: an engine::LinearBackend that runs the weight GEMMs with cuBLAS
// (CublasLinear) and leaves the ones too small to pay for their PCIe transfers on the CPU.
//   auto backend = gpu::CublasLinearBackend::create({}, &why);   // nullptr + why without a GPU
//   engine->setLinearBackend(backend);
// Built only inside the full project (it needs moewb_core); gpu/standalone leaves it out.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "moewb/engine/linear_backend.h"
#include "moewb/gpu/cublas_linear.h"

namespace moewb::gpu {

// When a GEMM goes to the GPU. Each call is timed by a cost model and runs where it is estimated faster:
//   GPU: fixed_overhead + bytes(w + x + y [+ bias]) / transfer_rate + flops / gpu_rate
//   CPU: flops / cpu_rate                                      (flops = 2 n in out)
// Every call uploads its weights, so the GPU wins only when each weight is used by enough tokens: with
// w dominating the bytes the condition is n > 2 cpu_rate / transfer_rate (~24 tokens for 16 cores of a
// baseline build; ~2 on this 2-core machine). The router (8 outputs per token, its input dominates the
// bytes) and experts that 1-2 tokens chose stay on the CPU; attention projections, experts of large
// batches and the LM head go to the GPU.
struct CublasBackendOptions {
  CublasLinearOptions gemm;  // tf32 (off), staging size
  // Measured per-core Eigen float32 GEMM rate (docs/engine.md: 6 GFLOP/s with SSE2, 15 with AVX2+FMA),
  // times the worker threads. 0: that estimate; set it to describe a different CPU.
  double cpu_gflops = 0;
  // Pipelined host copy into pinned memory + PCIe DMA: the single-threaded memcpy (~8-10 GB/s on a
  // server) is the slower of the two, not the link (25-50 GB/s for PCIe 4/5 x16).
  double transfer_gbps = 8;
  // Float32 FMA rate without tensor cores, a conservative fraction of the H100's ~60 TFLOP/s.
  double gpu_gflops = 30000;
  // Per call: ~4 host-blocking synchronisations (staging reuse, final download), a GEMM and a kernel
  // launch, about 10 us each.
  double fixed_overhead_us = 40;
  // Every GEMM on the GPU whatever its size (tests, and to measure the GPU path alone).
  bool offload_all = false;
};

// Where the calls went, for reports and the CLI's JSON.
struct CublasBackendStats {
  int64_t gpu_calls = 0, cpu_calls = 0;
  int64_t out_of_memory_fallbacks = 0;  // calls whose operands did not fit in GPU memory, run on the CPU
  double gpu_flops = 0, cpu_flops = 0;
  int64_t uploaded_bytes = 0, downloaded_bytes = 0;
};

class CublasLinearBackend final : public engine::LinearBackend {
 public:
  // nullptr when no usable device (or cuBLAS failed to start); `why` (when given) says which.
  static std::shared_ptr<CublasLinearBackend> create(const CublasBackendOptions& options, std::string* why);

  // Thread-safe: engines on several threads may share one backend; their GEMMs take turns on the stream.
  // Throws moewb::Error naming the failing CUDA/cuBLAS call; a matrix that does not fit in GPU memory
  // runs on the CPU instead (counted in stats().out_of_memory_fallbacks).
  void linear(const float* x, int64_t n, const MatrixRM& w, const float* bias, float* y) override;
  std::string name() const override { return "cuda"; }

  // Whether a GEMM of this shape runs on the GPU under the options' cost model.
  bool offloads(int64_t n, int64_t in, int64_t out, bool bias) const;
  // "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)"
  const std::string& deviceDescription() const { return device_description_; }
  const CublasBackendOptions& options() const { return options_; }
  CublasBackendStats stats() const;

 private:
  CublasLinearBackend(const CublasBackendOptions& options, std::unique_ptr<CublasLinear> gemm,
                      std::string device_description);

  CublasBackendOptions options_;
  double cpu_flops_per_second_ = 0;
  mutable std::mutex mutex_;  // guards gemm_ and stats_
  std::unique_ptr<CublasLinear> gemm_;
  CublasBackendStats stats_;
  std::string device_description_;
};

}  // namespace moewb::gpu

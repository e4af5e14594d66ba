// SPDX-License-Identifier: MIT
#include "moewb/gpu/cublas_linear_backend.h"

#include <fmt/format.h>

#include "moewb/error.h"
#include "moewb/parallel.h"

namespace moewb::gpu {
namespace {

// Per-core float32 GEMM rate of Eigen in this build (docs/engine.md, measured on the project's machine):
// the same flags compile this file and the engine, so the vector width seen here is the engine's.
double perCoreCpuGflops() {
#if defined(__AVX2__) && defined(__FMA__)
  return 15.0;
#else
  return 6.0;
#endif
}

}  // namespace

std::shared_ptr<CublasLinearBackend> CublasLinearBackend::create(const CublasBackendOptions& options,
                                                                 std::string* why) {
  std::unique_ptr<CublasLinear> gemm;
  Status s = CublasLinear::create(options.gemm, &gemm);
  if (!s.ok()) {
    if (why) *why = s.message;
    return nullptr;
  }
  DeviceInfo info;
  std::string description = "CUDA device";
  if (deviceInfo(&info).ok())
    description = fmt::format("{} (sm_{}{}, {:.1f} GiB)", info.name, info.major, info.minor,
                              double(info.global_memory_bytes) / double(1 << 30));
  return std::shared_ptr<CublasLinearBackend>(new CublasLinearBackend(options, std::move(gemm), description));
}

CublasLinearBackend::CublasLinearBackend(const CublasBackendOptions& options,
                                         std::unique_ptr<CublasLinear> gemm, std::string device_description)
    : options_(options), gemm_(std::move(gemm)), device_description_(std::move(device_description)) {
  const double gflops = options_.cpu_gflops > 0 ? options_.cpu_gflops : perCoreCpuGflops() * workerThreads();
  cpu_flops_per_second_ = gflops * 1e9;
}

bool CublasLinearBackend::offloads(int64_t n, int64_t in, int64_t out, bool bias) const {
  if (n <= 0 || in <= 0 || out <= 0) return false;  // nothing to multiply: the CPU path handles it
  if (options_.offload_all) return true;
  const double flops = 2.0 * double(n) * double(in) * double(out);
  const double bytes = 4.0 * (double(out) * double(in) + double(n) * double(in) + double(n) * double(out) +
                              (bias ? double(out) : 0.0));
  const double gpu_seconds = options_.fixed_overhead_us * 1e-6 + bytes / (options_.transfer_gbps * 1e9) +
                             flops / (options_.gpu_gflops * 1e9);
  const double cpu_seconds = flops / cpu_flops_per_second_;
  return gpu_seconds < cpu_seconds;
}

void CublasLinearBackend::linear(const float* x, int64_t n, const MatrixRM& w, const float* bias, float* y) {
  const int64_t in = w.cols(), out = w.rows();
  const double flops = 2.0 * double(n) * double(in) * double(out);
  if (offloads(n, in, out, bias != nullptr)) {
    std::lock_guard lock(mutex_);
    const Status s = gemm_->linear(x, n, w.data(), out, in, bias, y);
    if (s.ok()) {
      ++stats_.gpu_calls;
      stats_.gpu_flops += flops;
      return;
    }
    if (s.code != kCudaOutOfMemory)
      throw Error(fmt::format("CUDA linear backend: GEMM [{} x {}] x [{} x {}]^T failed: {}", n, in, out, in,
                              s.message));
    // One matrix (with its activations) larger than the free GPU memory: this call runs on the CPU, the
    // next (smaller) one tries the GPU again.
    ++stats_.out_of_memory_fallbacks;
  }
  // Outside the lock: another thread's GEMMs may use the GPU meanwhile.
  engine::cpuLinear(x, n, w, bias, y);
  std::lock_guard lock(mutex_);
  ++stats_.cpu_calls;
  stats_.cpu_flops += flops;
}

CublasBackendStats CublasLinearBackend::stats() const {
  std::lock_guard lock(mutex_);
  CublasBackendStats s = stats_;
  s.uploaded_bytes = gemm_->counters().uploaded_bytes;
  s.downloaded_bytes = gemm_->counters().downloaded_bytes;
  return s;
}

}  // namespace moewb::gpu

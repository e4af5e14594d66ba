// SPDX-License-Identifier: MIT
// The GPU BatchBackend. Each call: weights copied (in parallel, in chunks) into pinned memory and up in
// one transfer; one batched HQQ or MiLo call; codes, scales, zeros and the fp32 factors back through
// pinned memory. Everything stays allocated for the next call (grown when a larger batch comes).
#include "moewb/gpu/quant_backend.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "cuda_check.h"
#include "moewb/error.h"
#include "moewb/gpu/device.h"
#include "moewb/gpu/quantize.h"
#include "moewb/parallel.h"
#include "moewb/quant/model_quantizer.h"

namespace moewb::gpu {
namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Left free for cuBLAS/cuSOLVER workspaces, the handles, the CUDA context's own needs and fragmentation.
constexpr int64_t kReserveBytes = int64_t(1) << 30;

// Grow-only arrays in device memory (kPinned = false) or page-locked host memory (kPinned = true).
template <typename T, bool kPinned>
class GrowableBuffer {
 public:
  GrowableBuffer() = default;
  GrowableBuffer(const GrowableBuffer&) = delete;
  GrowableBuffer& operator=(const GrowableBuffer&) = delete;
  ~GrowableBuffer() { release(); }
  Status ensure(int64_t count) {
    count = std::max<int64_t>(count, 1);
    if (count <= capacity_) return Status::success();
    release();
    void* p = nullptr;
    if constexpr (kPinned)
      MOEWB_CUDA_TRY(cudaHostAlloc(&p, size_t(count) * sizeof(T), cudaHostAllocDefault));
    else
      MOEWB_CUDA_TRY(cudaMalloc(&p, size_t(count) * sizeof(T)));
    p_ = static_cast<T*>(p);
    capacity_ = count;
    return Status::success();
  }
  T* get() const { return p_; }
  int64_t bytes() const { return capacity_ * int64_t(sizeof(T)); }

 private:
  void release() {
    if (p_) {
      if constexpr (kPinned)
        cudaFreeHost(p_);
      else
        cudaFree(p_);
    }
    p_ = nullptr;
    capacity_ = 0;
  }
  T* p_ = nullptr;
  int64_t capacity_ = 0;
};
template <typename T>
using DeviceArray = GrowableBuffer<T, false>;
template <typename T>
using PinnedArray = GrowableBuffer<T, true>;

GpuHqqOptions toGpu(const quant::HqqOptions& o) {
  GpuHqqOptions g;
  g.lp_norm = o.lp_norm;
  g.beta = o.beta;
  g.kappa = o.kappa;
  g.max_steps = o.max_steps;
  g.patience = o.patience;
  return g;
}

std::string namesText(const std::vector<std::string>& names) {
  std::string out;
  const std::size_t shown = names.size() <= 4 ? names.size() : 3;
  for (std::size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + names[i];
  if (shown < names.size()) out += fmt::format(" and {} more", names.size() - shown);
  return out;
}

// Copies `count` bytes in chunks on several threads: one thread cannot fill the PCIe link from
// pageable memory.
void parallelCopy(void* dst, const void* src, std::size_t count) {
  constexpr std::size_t kChunk = std::size_t(32) << 20;
  const std::size_t chunks = (count + kChunk - 1) / kChunk;
  parallelFor(chunks, [&](std::size_t c) {
    const std::size_t begin = c * kChunk, len = std::min(kChunk, count - begin);
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, len);
  });
}

class CudaQuantBackend final : public quant::BatchBackend {
 public:
  explicit CudaQuantBackend(DeviceInfo info, cudaStream_t stream) : info_(std::move(info)), stream_(stream) {}
  ~CudaQuantBackend() override {
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda (" + info_.name + ")"; }

  std::string unsupportedReason(const quant::QuantizeSettings& s, int64_t rows, int64_t cols,
                                int rank) const override {
    // The GPU implements HQQ's codes and MiLo's loop (methods whose registry entry says runsOnGpu()).
    if (s.method != "hqq" && s.method != "milo") return s.method + " has no GPU implementation";
    if (s.grouped.bits != 3 || s.grouped.group != 64)
      return fmt::format(
          "the GPU quantizers make 3-bit codes in groups of 64 (asked: {}-bit in groups of {})",
          s.grouped.bits, s.grouped.group);
    if (cols % 64 != 0) return fmt::format("{} input features is not a multiple of 64", cols);
    if (s.method == "hqq" && s.hqq.stop != quant::HqqStopRule::PerGroupBestSquaredError)
      return "the GPU HQQ implements the per-group stop rule only";
    if (rank < 0 || rank > std::min(rows, cols))
      return fmt::format("rank {} is outside 0..{}", rank, std::min(rows, cols));
    return {};
  }

  int64_t memoryBudget() const override {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    // What this backend already holds is reused, so it counts as available.
    const int64_t held = weights_.bytes() + codes_.bytes() + scales_.bytes() + zeros_.bytes() + u_.bytes() +
                         v_.bytes() + workspace_.bytes();
    return std::max<int64_t>(0, int64_t(free_bytes) + held - kReserveBytes);
  }

  int64_t bytesPerMatrix(const quant::QuantizeSettings& s, int64_t rows, int64_t cols,
                         int rank) const override {
    const int64_t elements = rows * cols;
    int64_t bytes = elements * 4 + elements + 2 * (elements / 64) * 4;  // weights, codes, scales, zeros
    if (s.method == "milo" && rank > 0)
      bytes += int64_t(rank) * (rows + cols) * 4 + miloWorkspaceBytes(1, rows, cols, rank);
    return bytes;
  }

  std::vector<quant::ComputedMatrix> quantize(const quant::BatchRequest& request,
                                              quant::BatchTimings* timings) override {
    std::vector<quant::ComputedMatrix> out;
    quant::BatchTimings t;
    const Status s = run(request, &out, &t);
    if (!s.ok()) {
      // The device may hold a sticky error now; later calls will say so again with their own tensors.
      const char* method = request.settings->method == "milo" ? "MiLo" : "HQQ";
      throw Error(fmt::format("GPU {} of {} ({}x{}{}): {}", method, namesText(request.names), request.rows,
                              request.cols, request.rank > 0 ? fmt::format(", rank {}", request.rank) : "",
                              s.message));
    }
    if (timings) *timings = t;
    return out;
  }

 private:
  Status run(const quant::BatchRequest& req, std::vector<quant::ComputedMatrix>* out,
             quant::BatchTimings* t) {
    const quant::QuantizeSettings& s = *req.settings;
    const int64_t batch = int64_t(req.weights.size()), n = req.rows, k = req.cols, r = req.rank;
    const int64_t elements = n * k, groups = elements / 64;
    const bool milo = s.method == "milo" && r > 0;
    for (const MatrixRM* w : req.weights)
      if (!w || w->rows() != n || w->cols() != k)
        return Status::failure(-1, fmt::format("a weight matrix of the batch is not {}x{}", n, k));

    // Upload.
    auto t0 = Clock::now();
    MOEWB_STATUS_TRY(weights_.ensure(batch * elements));
    MOEWB_STATUS_TRY(codes_.ensure(batch * elements));
    MOEWB_STATUS_TRY(scales_.ensure(batch * groups));
    MOEWB_STATUS_TRY(zeros_.ensure(batch * groups));
    MOEWB_STATUS_TRY(host_weights_.ensure(batch * elements));
    MOEWB_STATUS_TRY(host_codes_.ensure(batch * elements));
    MOEWB_STATUS_TRY(host_scales_.ensure(batch * groups));
    MOEWB_STATUS_TRY(host_zeros_.ensure(batch * groups));
    if (milo) {
      MOEWB_STATUS_TRY(u_.ensure(batch * n * r));
      MOEWB_STATUS_TRY(v_.ensure(batch * r * k));
      MOEWB_STATUS_TRY(host_u_.ensure(batch * n * r));
      MOEWB_STATUS_TRY(host_v_.ensure(batch * r * k));
    }
    for (int64_t b = 0; b < batch; ++b)
      parallelCopy(host_weights_.get() + b * elements, req.weights[size_t(b)]->data(), size_t(elements) * 4);
    MOEWB_CUDA_TRY(cudaMemcpyAsync(weights_.get(), host_weights_.get(), size_t(batch * elements) * 4,
                                   cudaMemcpyHostToDevice, stream_));
    MOEWB_CUDA_TRY(cudaStreamSynchronize(stream_));
    t->upload = secondsSince(t0);

    // Quantize.
    t0 = Clock::now();
    GpuMiloReport report;
    if (milo) {
      GpuMiloOptions o;
      o.rank = int(r);
      o.iterations = std::max(1, s.milo.max_iters);
      o.hqq = toGpu(s.milo.hqq);
      o.seeds = req.seeds;
      MOEWB_STATUS_TRY(miloCompressBatched(weights_.get(), batch, n, k, o, codes_.get(), scales_.get(),
                                           zeros_.get(), u_.get(), v_.get(), &report, stream_, &workspace_));
    } else {
      // HQQ, or MiLo at rank 0 (a single HQQ with MiLo's HQQ options).
      const quant::HqqOptions& h = s.method == "milo" ? s.milo.hqq : s.hqq;
      MOEWB_STATUS_TRY(hqqQuantizeBatched(weights_.get(), batch, n, k, toGpu(h), codes_.get(), scales_.get(),
                                          zeros_.get(), nullptr, stream_));
      MOEWB_CUDA_TRY(cudaStreamSynchronize(stream_));
    }
    t->compute = secondsSince(t0);

    // Download and unpack.
    t0 = Clock::now();
    MOEWB_CUDA_TRY(cudaMemcpyAsync(host_codes_.get(), codes_.get(), size_t(batch * elements),
                                   cudaMemcpyDeviceToHost, stream_));
    MOEWB_CUDA_TRY(cudaMemcpyAsync(host_scales_.get(), scales_.get(), size_t(batch * groups) * 4,
                                   cudaMemcpyDeviceToHost, stream_));
    MOEWB_CUDA_TRY(cudaMemcpyAsync(host_zeros_.get(), zeros_.get(), size_t(batch * groups) * 4,
                                   cudaMemcpyDeviceToHost, stream_));
    if (milo) {
      MOEWB_CUDA_TRY(cudaMemcpyAsync(host_u_.get(), u_.get(), size_t(batch * n * r) * 4,
                                     cudaMemcpyDeviceToHost, stream_));
      MOEWB_CUDA_TRY(cudaMemcpyAsync(host_v_.get(), v_.get(), size_t(batch * r * k) * 4,
                                     cudaMemcpyDeviceToHost, stream_));
    }
    MOEWB_CUDA_TRY(cudaStreamSynchronize(stream_));
    out->resize(size_t(batch));
    parallelFor(size_t(batch), [&](std::size_t b) {
      quant::ComputedMatrix& c = (*out)[b];
      c.base.rows = n;
      c.base.cols = k;
      c.base.bits = 3;
      c.base.group = 64;
      const uint8_t* codes = host_codes_.get() + int64_t(b) * elements;
      c.base.codes.assign(codes, codes + elements);
      const float* scales = host_scales_.get() + int64_t(b) * groups;
      const float* zeros = host_zeros_.get() + int64_t(b) * groups;
      c.base.scales.assign(scales, scales + groups);
      c.base.zeros.assign(zeros, zeros + groups);
      if (milo) {
        c.u = Eigen::Map<const MatrixRM>(host_u_.get() + int64_t(b) * n * r, n, r);
        c.v = Eigen::Map<const MatrixRM>(host_v_.get() + int64_t(b) * r * k, r, k);
        c.curve = report.error_history.at(b);
        c.best_iteration = -1;  // the GPU loop keeps its last iterate
      }
    });
    t->download = secondsSince(t0);
    return Status::success();
  }

  DeviceInfo info_;
  cudaStream_t stream_ = nullptr;
  DeviceArray<float> weights_, scales_, zeros_, u_, v_;
  DeviceArray<uint8_t> codes_;
  PinnedArray<float> host_weights_, host_scales_, host_zeros_, host_u_, host_v_;
  PinnedArray<uint8_t> host_codes_;
  GpuMiloWorkspace workspace_;
};

}  // namespace

std::unique_ptr<quant::BatchBackend> makeQuantBackend(std::string* why) {
  std::string reason;
  if (!deviceAvailable(&reason)) {
    if (why) *why = reason;
    return nullptr;
  }
  DeviceInfo info;
  Status s = deviceInfo(&info);
  cudaStream_t stream = nullptr;
  if (s.ok()) {
    const cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) s = detail::cudaFailure(e, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
  }
  if (!s.ok()) {
    if (why) *why = s.message;
    return nullptr;
  }
  return std::make_unique<CudaQuantBackend>(std::move(info), stream);
}

}  // namespace moewb::gpu

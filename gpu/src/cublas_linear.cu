// SPDX-License-Identifier: MIT
// cuBLAS GEMM of host operands for the engine's CUDA path (see moewb/gpu/cublas_linear.h).
//
// One call: x, w (and bias) are copied through two pinned staging buffers into device buffers, one
// float32 GEMM and a bias kernel run on the object's stream, and y comes back through the same staging
// buffers. Pageable host memory cannot be the source of an asynchronous copy, and pinning the engine's
// freshly converted weight matrices on every call (cudaHostRegister) costs about as much as copying them,
// so the host copy into a pinned buffer is pipelined with the DMA out of the other one instead.
#include <algorithm>
#include <climits>
#include <cstring>

#include "cuda_check.h"
#include "moewb/gpu/cublas_linear.h"

namespace moewb::gpu {
namespace {

static_assert(kCudaOutOfMemory == int(cudaErrorMemoryAllocation), "kCudaOutOfMemory must match CUDA");

// y[r, c] += bias[c] over a row-major [rows, cols] matrix. The GEMM already wrote y, so this is one extra
// pass over it in device memory: negligible next to the PCIe copies, and it keeps the CPU's order of
// operations (product first, then the bias) so that results differ only by the GEMM's summation order.
__global__ void addBiasRows(float* y, const float* bias, int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] += bias[i % cols];
}

// A device buffer that only grows. Growth is geometric (x1.5) because the engine's activation sizes
// change with the number of tokens routed to each expert; the weight buffer settles after one layer.
struct DeviceBuffer {
  float* data = nullptr;
  size_t capacity = 0;  // floats

  void release() {
    if (data) cudaFree(data);
    data = nullptr;
    capacity = 0;
  }
  // Returns the cudaMalloc error (not a Status): an allocation failure is handled by the caller.
  cudaError_t reserve(size_t floats) {
    if (floats <= capacity) return cudaSuccess;
    release();
    const size_t wanted = std::max(floats, capacity + capacity / 2);
    cudaError_t e = cudaMalloc(&data, wanted * sizeof(float));
    if (e == cudaErrorMemoryAllocation && wanted > floats) {
      (void)cudaGetLastError();
      e = cudaMalloc(&data, floats * sizeof(float));  // the headroom did not fit; the exact size may
      if (e == cudaSuccess) capacity = floats;
    } else if (e == cudaSuccess) {
      capacity = wanted;
    }
    if (e != cudaSuccess) {
      data = nullptr;
      capacity = 0;
    }
    return e;
  }
};

}  // namespace

struct CublasLinear::Impl {
  CublasLinearOptions options;
  CublasLinearCounters counters;
  int device = 0;
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  float* staging[2] = {nullptr, nullptr};  // pinned host memory
  cudaEvent_t staging_free[2] = {nullptr, nullptr};
  size_t staging_floats = 0;
  DeviceBuffer dx, dw, dy, dbias;

  ~Impl() {
    dx.release();
    dw.release();
    dy.release();
    dbias.release();
    for (int i = 0; i < 2; ++i) {
      if (staging_free[i]) cudaEventDestroy(staging_free[i]);
      if (staging[i]) cudaFreeHost(staging[i]);
    }
    if (handle) cublasDestroy(handle);
    if (stream) cudaStreamDestroy(stream);
  }

  // Host -> device through the staging buffers: while chunk k is copied into one pinned buffer on the
  // CPU, chunk k-1 is on its way out of the other. The event of a buffer marks its last DMA as done.
  Status upload(float* device_dst, const float* host_src, size_t floats) {
    for (size_t off = 0, k = 0; off < floats; off += staging_floats, ++k) {
      const int slot = int(k % 2);
      const size_t len = std::min(staging_floats, floats - off);
      MOEWB_CUDA_TRY(cudaEventSynchronize(staging_free[slot]));
      std::memcpy(staging[slot], host_src + off, len * sizeof(float));
      MOEWB_CUDA_TRY(cudaMemcpyAsync(device_dst + off, staging[slot], len * sizeof(float),
                                     cudaMemcpyHostToDevice, stream));
      MOEWB_CUDA_TRY(cudaEventRecord(staging_free[slot], stream));
    }
    counters.uploaded_bytes += int64_t(floats * sizeof(float));
    return Status::success();
  }

  // Device -> host, the mirror image: the DMA of chunk k runs while the CPU copies chunk k-1 out. Chunk k
  // reuses the buffer of chunk k-2, which the previous iteration has already copied out.
  Status download(float* host_dst, const float* device_src, size_t floats) {
    size_t prev_off = 0, prev_len = 0;
    int prev_slot = 0;
    for (size_t off = 0, k = 0; off < floats; off += staging_floats, ++k) {
      const int slot = int(k % 2);
      const size_t len = std::min(staging_floats, floats - off);
      MOEWB_CUDA_TRY(cudaMemcpyAsync(staging[slot], device_src + off, len * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream));
      MOEWB_CUDA_TRY(cudaEventRecord(staging_free[slot], stream));
      if (prev_len > 0) {
        MOEWB_CUDA_TRY(cudaEventSynchronize(staging_free[prev_slot]));
        std::memcpy(host_dst + prev_off, staging[prev_slot], prev_len * sizeof(float));
      }
      prev_off = off;
      prev_len = len;
      prev_slot = slot;
    }
    if (prev_len > 0) {
      MOEWB_CUDA_TRY(cudaEventSynchronize(staging_free[prev_slot]));
      std::memcpy(host_dst + prev_off, staging[prev_slot], prev_len * sizeof(float));
    }
    counters.downloaded_bytes += int64_t(floats * sizeof(float));
    return Status::success();
  }

  // Reserves every operand buffer; on an allocation failure frees them all (another shape's leftovers
  // may be what fills the device) and tries once more before giving up with kCudaOutOfMemory.
  Status reserve(size_t x_floats, size_t w_floats, size_t y_floats, size_t bias_floats) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      cudaError_t e = dw.reserve(w_floats);
      if (e == cudaSuccess) e = dx.reserve(x_floats);
      if (e == cudaSuccess) e = dy.reserve(y_floats);
      if (e == cudaSuccess && bias_floats) e = dbias.reserve(bias_floats);
      if (e == cudaSuccess) return Status::success();
      if (e != cudaErrorMemoryAllocation)
        return detail::cudaFailure(e, "cudaMalloc (operand buffers)", __FILE__, __LINE__);
      (void)cudaGetLastError();
      dx.release();
      dw.release();
      dy.release();
      dbias.release();
    }
    return Status::failure(
        kCudaOutOfMemory,
        "cudaMalloc: " + std::to_string((x_floats + w_floats + y_floats + bias_floats) * 4) +
            " bytes of operands do not fit in GPU memory");
  }
};

CublasLinear::CublasLinear() : impl_(std::make_unique<Impl>()) {}
CublasLinear::~CublasLinear() = default;

Status CublasLinear::create(const CublasLinearOptions& options, std::unique_ptr<CublasLinear>* out) {
  std::string why;
  if (!deviceAvailable(&why)) return Status::failure(-1, why);
  if (options.staging_bytes < int64_t(sizeof(float)))
    return Status::failure(-1, "CublasLinearOptions::staging_bytes must hold at least one float");
  std::unique_ptr<CublasLinear> self(new CublasLinear());
  Impl& m = *self->impl_;
  m.options = options;
  MOEWB_CUDA_TRY(cudaGetDevice(&m.device));
  MOEWB_CUDA_TRY(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  MOEWB_CUBLAS_TRY(cublasCreate(&m.handle));
  MOEWB_CUBLAS_TRY(cublasSetStream(m.handle, m.stream));
  // The compute type of each GEMM says whether TF32 is allowed; the default math mode adds nothing.
  MOEWB_CUBLAS_TRY(cublasSetMathMode(m.handle, CUBLAS_DEFAULT_MATH));
  m.staging_floats = size_t(options.staging_bytes) / sizeof(float);
  for (int i = 0; i < 2; ++i) {
    MOEWB_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&m.staging[i]), m.staging_floats * sizeof(float),
                                 cudaHostAllocDefault));
    MOEWB_CUDA_TRY(cudaEventCreateWithFlags(&m.staging_free[i], cudaEventDisableTiming));
  }
  *out = std::move(self);
  return Status::success();
}

Status CublasLinear::linear(const float* x, int64_t n, const float* w, int64_t out, int64_t in,
                            const float* bias, float* y) {
  Impl& m = *impl_;
  if (n < 0 || out < 0 || in < 0) return Status::failure(-1, "CublasLinear::linear: negative dimension");
  if (n > INT_MAX || out > INT_MAX || in > INT_MAX)
    return Status::failure(-1, "CublasLinear::linear: a dimension exceeds cuBLAS's int range");
  if (n == 0 || out == 0) return Status::success();
  // The current device is per host thread: the engine may run on a different thread than create().
  MOEWB_CUDA_TRY(cudaSetDevice(m.device));
  const size_t xs = size_t(n) * size_t(in), ws = size_t(out) * size_t(in), ys = size_t(n) * size_t(out);
  MOEWB_STATUS_TRY(m.reserve(std::max<size_t>(xs, 1), std::max<size_t>(ws, 1), ys, bias ? size_t(out) : 0));
  MOEWB_STATUS_TRY(m.upload(m.dx.data, x, xs));
  MOEWB_STATUS_TRY(m.upload(m.dw.data, w, ws));
  if (bias) MOEWB_STATUS_TRY(m.upload(m.dbias.data, bias, size_t(out)));

  // Row-major y[n,out] = x[n,in] w[out,in]^T is, read column-major, Y'[out,n] = W'^T X' with W' = w as an
  // [in,out] column-major matrix (ld in) and X' = x as [in,n] (ld in): op(A) = W'^T, op(B) = X'.
  const float one = 1.0f, zero = 0.0f;
  const cublasComputeType_t compute = m.options.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  if (in > 0) {
    MOEWB_CUBLAS_TRY(cublasGemmEx(m.handle, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(n), int(in), &one,
                                  m.dw.data, CUDA_R_32F, int(in), m.dx.data, CUDA_R_32F, int(in), &zero,
                                  m.dy.data, CUDA_R_32F, int(out), compute, CUBLAS_GEMM_DEFAULT));
  } else {
    MOEWB_CUDA_TRY(cudaMemsetAsync(m.dy.data, 0, ys * sizeof(float), m.stream));  // empty sum
  }
  if (bias) {
    const int threads = 256;
    const int blocks = int(std::min<int64_t>((int64_t(ys) + threads - 1) / threads, 4096));
    addBiasRows<<<blocks, threads, 0, m.stream>>>(m.dy.data, m.dbias.data, n, out);
    MOEWB_CUDA_TRY(cudaGetLastError());
  }
  MOEWB_STATUS_TRY(m.download(y, m.dy.data, ys));
  ++m.counters.calls;
  m.counters.flops += 2.0 * double(n) * double(in) * double(out);
  return Status::success();
}

void CublasLinear::releaseDeviceBuffers() {
  impl_->dx.release();
  impl_->dw.release();
  impl_->dy.release();
  impl_->dbias.release();
}

const CublasLinearCounters& CublasLinear::counters() const {
  return impl_->counters;
}
const CublasLinearOptions& CublasLinear::options() const {
  return impl_->options;
}

}  // namespace moewb::gpu

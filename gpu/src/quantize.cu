// SPDX-License-Identifier: MIT
// GPU HQQ and MiLo, batched over experts of one shape.
//
// HQQ: one warp per group of 64 (two values per lane), the whole solver in registers; the arithmetic
// follows core/src/quant/grouped_quant.cpp step by step (separate roundings, no fused multiply-add, means
// in double) so codes and zeros match the CPU path except where float sums reorder a near-tie.
//
// MiLo: alternate "HQQ of W - U V" and "rank-r fit of the residual R = W - dequant(Q)". The rank-r fit is
// a block power (subspace) iteration on cuBLAS, warm-started from the previous iteration's subspace so
// one step per iteration suffices once the first fit has converged:
//     P = R Vo, Q1 = orth(P), Z = R^T Q1, Vo = orth(Z);  compensator = Q1 Z^T,
//     ||R - Q1 Z^T||^2 = ||R||^2 - ||Z||^2 (Q1 orthonormal), so the error costs no extra pass.
// orth() goes through the r x r Gram matrix and a cuSOLVER symmetric eigensolver (P E Lambda^-1/2).
// Row-major [n][k] matrices are handed to cuBLAS as column-major k x n.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <cmath>
#include <vector>

#include "cuda_check.h"
#include "moewb/gpu/quantize.h"

namespace moewb::gpu {
namespace {

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}
__device__ __forceinline__ double warpSumD(double v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}
__device__ __forceinline__ float warpMin(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fminf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
__device__ __forceinline__ float toHalfPrecision(float x) { return __half2float(__float2half_rn(x)); }

struct HqqParams {
  const float* x;       // values to quantize [rows][k]
  const float* ref;     // nullable: residual = ref - dequant
  float* residual;      // nullable
  double* resid_sq;     // nullable: per-expert sum of residual^2 (atomic)
  uint8_t* codes;       // nullable
  float* scales;
  float* zeros;
  float* dequant;       // nullable
  int64_t rows, rows_per_expert;
  int k;
  float p_minus_1;
  double beta, kappa;
  int max_steps, patience;
};

// One warp per group of 64 values.
__global__ void hqqKernel(const HqqParams p) {
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int gpr = p.k / 64;
  if (warp >= p.rows * gpr) return;
  const int64_t row = warp / gpr;
  const int gi = int(warp % gpr);
  const int64_t base = row * p.k + int64_t(gi) * 64;
  const float x0 = p.x[base + lane], x1 = p.x[base + 32 + lane];
  const float lo = warpMin(fminf(x0, x1)), hi = warpMax(fmaxf(x0, x1));
  const float max_abs = fmaxf(fabsf(lo), fabsf(hi));
  const float max_code = 7.0f;
  float step = __fdiv_rn(__fsub_rn(hi, lo), max_code);
  step = fmaxf(fmaxf(step, 5e-5f), __fdiv_rn(max_abs, 30000.0f));
  step = toHalfPrecision(step);
  const float zero0 = toHalfPrecision(__fdiv_rn(-lo, step));
  const float inv_step = __fdiv_rn(1.0f, step);

  auto encode = [&](float xv, float z) {
    return fminf(fmaxf(rintf(__fadd_rn(__fmul_rn(xv, inv_step), z)), 0.0f), max_code);
  };
  float zero = zero0, best_zero = zero0;
  double best_err = INFINITY, beta = p.beta;
  int since_best = 0;
  for (int s = 0; s <= p.max_steps; ++s) {
    const float c0 = encode(x0, zero), c1 = encode(x1, zero);
    const float e0 = __fsub_rn(x0, __fmul_rn(__fsub_rn(c0, zero), step));
    const float e1 = __fsub_rn(x1, __fmul_rn(__fsub_rn(c1, zero), step));
    const double e2 = double(warpSum(__fadd_rn(__fmul_rn(e0, e0), __fmul_rn(e1, e1))));
    if (e2 < best_err) {
      best_err = e2;
      best_zero = zero;
      since_best = 0;
    } else if (++since_best >= p.patience) {
      break;
    }
    if (s == p.max_steps) break;
    // Generalised soft-threshold sign(e) * relu(|e| - |e|^(p-1) / beta), then the closed-form zero.
    const float fb = float(beta);
    const float m0 = fabsf(e0), m1 = fabsf(e1);
    const float sh0 = fmaxf(__fsub_rn(m0, __fdiv_rn(expf(__fmul_rn(p.p_minus_1, logf(m0))), fb)), 0.0f) * copysignf(1.0f, e0) * (e0 != 0.0f);
    const float sh1 = fmaxf(__fsub_rn(m1, __fdiv_rn(expf(__fmul_rn(p.p_minus_1, logf(m1))), fb)), 0.0f) * copysignf(1.0f, e1) * (e1 != 0.0f);
    const double t0 = double(__fsub_rn(c0, __fmul_rn(__fsub_rn(x0, sh0), inv_step)));
    const double t1 = double(__fsub_rn(c1, __fmul_rn(__fsub_rn(x1, sh1), inv_step)));
    zero = toHalfPrecision(float(warpSumD(t0 + t1) / 64.0));
    beta *= p.kappa;
  }
  const float c0 = encode(x0, best_zero), c1 = encode(x1, best_zero);
  const float d0 = __fmul_rn(__fsub_rn(c0, best_zero), step), d1 = __fmul_rn(__fsub_rn(c1, best_zero), step);
  if (p.codes) {
    p.codes[base + lane] = uint8_t(c0);
    p.codes[base + 32 + lane] = uint8_t(c1);
  }
  if (lane == 0) {
    p.scales[row * gpr + gi] = step;
    p.zeros[row * gpr + gi] = best_zero;
  }
  if (p.dequant) {
    p.dequant[base + lane] = d0;
    p.dequant[base + 32 + lane] = d1;
  }
  if (p.residual) {
    const float r0 = p.ref[base + lane] - d0, r1 = p.ref[base + 32 + lane] - d1;
    p.residual[base + lane] = r0;
    p.residual[base + 32 + lane] = r1;
    if (p.resid_sq) {
      const double s2 = warpSumD(double(r0) * r0 + double(r1) * r1);
      if (lane == 0) atomicAdd(p.resid_sq + row / p.rows_per_expert, s2);
    }
  }
}

// Per-expert sum of squares of a [batch][count] array (double accumulation).
__global__ void sumSquaresKernel(const float* x, int64_t count, double* out) {
  const int b = blockIdx.y;
  const float* xb = x + int64_t(b) * count;
  double acc = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    acc += double(xb[i]) * xb[i];
  acc = warpSumD(acc);
  if (threadIdx.x % 32 == 0) atomicAdd(out + b, acc);
}

// Deterministic pseudo-normal numbers (hash + Box-Muller) for the random start of the subspace; value i
// is a function of (seed, offset + i) only.
__global__ void randomNormalKernel(float* x, int64_t count, uint64_t seed, int64_t offset) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  auto hash = [](uint64_t v) {
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdULL;
    v ^= v >> 33;
    v *= 0xc4ceb9fe1a85ec53ULL;
    v ^= v >> 33;
    return v;
  };
  const uint64_t h = hash(seed * 0x9E3779B97F4A7C15ULL + uint64_t(offset + i));
  const float u1 = (float((h >> 40) & 0xFFFFFF) + 1.0f) / 16777217.0f, u2 = float((h >> 16) & 0xFFFFFF) / 16777216.0f;
  x[i] = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

// M = E diag(f(lambda)) per expert (eigenvalues ascending in w), with f = lambda^power, and 0 for the
// directions with lambda <= 1e-12 * max (dropped). power -1/2 orthonormalises (orth()); +-1/4 splits the
// singular values between u and v (factors()). -1/2 goes through rsqrtf, as it always has.
__global__ void scaleEigenvectorsKernel(const float* e, const float* w, float* m, int r, float power) {
  const int b = blockIdx.y;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= r * r) return;
  const int col = idx / r;
  const float lmax = w[int64_t(b) * r + r - 1];
  const float l = w[int64_t(b) * r + col];
  const bool kept = l > 1e-12f * lmax && l > 0.f;
  const float f = kept ? (power == -0.5f ? rsqrtf(l) : powf(l, power)) : 0.0f;
  m[int64_t(b) * r * r + idx] = e[int64_t(b) * r * r + idx] * f;
}

struct Handles {
  cublasHandle_t blas = nullptr;
  cusolverDnHandle_t solver = nullptr;
  ~Handles() {
    if (blas) cublasDestroy(blas);
    if (solver) cusolverDnDestroy(solver);
  }
};
Status handles(Handles** out) {
  thread_local Handles h;
  if (!h.blas) MOEWB_CUBLAS_TRY(cublasCreate(&h.blas));
  if (!h.solver) MOEWB_CUSOLVER_TRY(cusolverDnCreate(&h.solver));
  *out = &h;
  return Status::success();
}

// Grow-only device array: ensure() reallocates only when a call needs more than any before it.
template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  int64_t capacity = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
  Status ensure(int64_t count) {
    count = std::max<int64_t>(count, 1);
    if (count <= capacity) return Status::success();
    if (p) cudaFree(p);
    p = nullptr;
    capacity = 0;
    MOEWB_CUDA_TRY(cudaMalloc(&p, size_t(count) * sizeof(T)));
    capacity = count;
    return Status::success();
  }
  int64_t bytes() const { return capacity * int64_t(sizeof(T)); }
};

// Per-expert sum of squares of a [batch][count] array into out (double), through `scratch`.
Status sumSquaresPerExpert(const float* x, int64_t batch, int64_t count, unsigned blocks_per_expert,
                           DeviceBuffer<double>& scratch, std::vector<double>* out, cudaStream_t st) {
  MOEWB_STATUS_TRY(scratch.ensure(batch));
  MOEWB_CUDA_TRY(cudaMemsetAsync(scratch.p, 0, size_t(batch) * sizeof(double), st));
  sumSquaresKernel<<<dim3(blocks_per_expert, unsigned(batch)), 256, 0, st>>>(x, count, scratch.p);
  MOEWB_CUDA_TRY(cudaGetLastError());
  out->resize(size_t(batch));
  MOEWB_CUDA_TRY(
      cudaMemcpyAsync(out->data(), scratch.p, size_t(batch) * sizeof(double), cudaMemcpyDeviceToHost, st));
  MOEWB_CUDA_TRY(cudaStreamSynchronize(st));
  return Status::success();
}

Status launchHqq(const HqqParams& p, cudaStream_t st) {
  const int64_t warps = p.rows * (p.k / 64);
  const int64_t blocks = (warps * 32 + 255) / 256;
  hqqKernel<<<unsigned(blocks), 256, 0, st>>>(p);
  MOEWB_CUDA_TRY(cudaGetLastError());
  return Status::success();
}

HqqParams hqqParams(const GpuHqqOptions& o, const float* x, int64_t rows, int64_t rows_per_expert, int64_t k) {
  HqqParams p{};
  p.x = x;
  p.rows = rows;
  p.rows_per_expert = rows_per_expert;
  p.k = int(k);
  p.p_minus_1 = float(o.lp_norm - 1.0);
  p.beta = o.beta;
  p.kappa = o.kappa;
  p.max_steps = o.max_steps;
  p.patience = std::max(1, o.patience);
  return p;
}

}  // namespace

// Everything miloCompressBatched allocates, grown to the largest call and reused.
struct GpuMiloWorkspace::Buffers {
  DeviceBuffer<float> target, resid, scales, zeros;  // [b][n][k], [b][n][k/64] when the caller gives none
  DeviceBuffer<float> p, q1, z, vo, g, m, eigenvalues, eig_work;
  DeviceBuffer<int> info;
  DeviceBuffer<double> resid_sq, energy_sq, weight_sq;
  int64_t bytes() const {
    return target.bytes() + resid.bytes() + scales.bytes() + zeros.bytes() + p.bytes() + q1.bytes() +
           z.bytes() + vo.bytes() + g.bytes() + m.bytes() + eigenvalues.bytes() + eig_work.bytes() +
           info.bytes() + resid_sq.bytes() + energy_sq.bytes() + weight_sq.bytes();
  }
};

GpuMiloWorkspace::GpuMiloWorkspace() : buffers_(std::make_unique<Buffers>()) {}
GpuMiloWorkspace::~GpuMiloWorkspace() = default;
int64_t GpuMiloWorkspace::bytes() const {
  return buffers_->bytes();
}

namespace {

// The low-rank machinery for one batch (see the file comment); its arrays live in the workspace.
class LowRank {
 public:
  LowRank(int64_t batch, int64_t n, int64_t k, int r, cudaStream_t st, GpuMiloWorkspace::Buffers& ws)
      : b_(batch), n_(n), k_(k), r_(r), st_(st), ws_(ws) {}

  Status init(const GpuMiloOptions& o) {
    MOEWB_STATUS_TRY(handles(&h_));
    MOEWB_CUBLAS_TRY(cublasSetStream(h_->blas, st_));
    MOEWB_CUSOLVER_TRY(cusolverDnSetStream(h_->solver, st_));
    MOEWB_STATUS_TRY(ws_.p.ensure(b_ * n_ * r_));
    MOEWB_STATUS_TRY(ws_.q1.ensure(b_ * n_ * r_));
    MOEWB_STATUS_TRY(ws_.z.ensure(b_ * k_ * r_));
    MOEWB_STATUS_TRY(ws_.vo.ensure(b_ * k_ * r_));
    MOEWB_STATUS_TRY(ws_.g.ensure(b_ * r_ * r_));
    MOEWB_STATUS_TRY(ws_.m.ensure(b_ * r_ * r_));
    MOEWB_STATUS_TRY(ws_.eigenvalues.ensure(b_ * r_));
    MOEWB_STATUS_TRY(ws_.info.ensure(1));
    int lwork = 0;
    MOEWB_CUSOLVER_TRY(cusolverDnSsyevd_bufferSize(h_->solver, CUSOLVER_EIG_MODE_VECTOR,
                                                   CUBLAS_FILL_MODE_LOWER, r_, ws_.g.p, r_, ws_.eigenvalues.p,
                                                   &lwork));
    MOEWB_STATUS_TRY(ws_.eig_work.ensure(lwork));
    lwork_ = lwork;
    // Random start: Vo = orth(Gaussian K x r), one seed per expert when given.
    const int64_t per_expert = k_ * r_;
    if (o.seeds.empty()) {
      const int64_t cnt = b_ * per_expert;
      randomNormalKernel<<<unsigned((cnt + 255) / 256), 256, 0, st_>>>(ws_.z.p, cnt, o.seed, 0);
      MOEWB_CUDA_TRY(cudaGetLastError());
    } else {
      for (int64_t b = 0; b < b_; ++b) {
        randomNormalKernel<<<unsigned((per_expert + 255) / 256), 256, 0, st_>>>(
            ws_.z.p + b * per_expert, per_expert, o.seeds[size_t(b)], 0);
        MOEWB_CUDA_TRY(cudaGetLastError());
      }
    }
    return orth(ws_.z.p, ws_.vo.p, k_);
  }

  // One subspace-iteration step on R (row-major n x k per expert): P = R Vo, Q1 = orth(P), Z = R^T Q1,
  // Vo = orth(Z).
  Status step(const float* r) {
    const float one = 1.f, zero = 0.f;
    // P (n x r, col-major) = Rc^T Vo with Rc = k x n col-major.
    MOEWB_CUBLAS_TRY(cublasSgemmStridedBatched(h_->blas, CUBLAS_OP_T, CUBLAS_OP_N, int(n_), r_, int(k_), &one,
                                               r, int(k_), n_ * k_, ws_.vo.p, int(k_), k_ * r_, &zero,
                                               ws_.p.p, int(n_), n_ * r_, int(b_)));
    MOEWB_STATUS_TRY(orth(ws_.p.p, ws_.q1.p, n_));
    // Z (k x r) = Rc Q1.
    MOEWB_CUBLAS_TRY(cublasSgemmStridedBatched(h_->blas, CUBLAS_OP_N, CUBLAS_OP_N, int(k_), r_, int(n_), &one,
                                               r, int(k_), n_ * k_, ws_.q1.p, int(n_), n_ * r_, &zero,
                                               ws_.z.p, int(k_), k_ * r_, int(b_)));
    MOEWB_STATUS_TRY(orth(ws_.z.p, ws_.vo.p, k_));
    return Status::success();
  }

  // ||Z||^2 per expert (captured energy of the fit).
  Status capturedEnergy(std::vector<double>* out) {
    return sumSquaresPerExpert(ws_.z.p, b_, k_ * r_, 64, ws_.energy_sq, out, st_);
  }

  // dst (row-major n x k) = src - Q1 Z^T, i.e. col-major: dstc = srcc - Z Q1^T.
  Status subtractCompensator(const float* src, float* dst) {
    MOEWB_CUDA_TRY(cudaMemcpyAsync(dst, src, size_t(b_ * n_ * k_) * sizeof(float), cudaMemcpyDeviceToDevice, st_));
    const float minus = -1.f, one = 1.f;
    MOEWB_CUBLAS_TRY(cublasSgemmStridedBatched(h_->blas, CUBLAS_OP_N, CUBLAS_OP_T, int(k_), int(n_), r_,
                                               &minus, ws_.z.p, int(k_), k_ * r_, ws_.q1.p, int(n_), n_ * r_,
                                               &one, dst, int(k_), n_ * k_, int(b_)));
    return Status::success();
  }

  // Balanced factors of Q1 Z^T: Z^T Z = E L E^T, u = Q1 E L^1/4, v = L^-1/4 E^T Z^T (row-major outputs).
  Status factors(float* u, float* v) {
    const float one = 1.f, zero = 0.f;
    MOEWB_CUBLAS_TRY(cublasSgemmStridedBatched(h_->blas, CUBLAS_OP_T, CUBLAS_OP_N, r_, r_, int(k_), &one,
                                               ws_.z.p, int(k_), k_ * r_, ws_.z.p, int(k_), k_ * r_, &zero,
                                               ws_.g.p, r_, r_ * r_, int(b_)));
    MOEWB_STATUS_TRY(eig());
    if (u) {
      MOEWB_STATUS_TRY(scaleEigenvectors(0.25f));
      // u row-major n x r == col-major r x n: u^T = (Q1 M)^T = M^T Q1^T.
      MOEWB_CUBLAS_TRY(cublasSgemmStridedBatched(h_->blas, CUBLAS_OP_T, CUBLAS_OP_T, r_, int(n_), r_, &one,
                                                 ws_.m.p, r_, r_ * r_, ws_.q1.p, int(n_), n_ * r_, &zero, u,
                                                 r_, n_ * r_, int(b_)));
    }
    if (v) {
      MOEWB_STATUS_TRY(scaleEigenvectors(-0.25f));
      // v row-major r x k == col-major k x r = Z M.
      MOEWB_CUBLAS_TRY(cublasSgemmStridedBatched(h_->blas, CUBLAS_OP_N, CUBLAS_OP_N, int(k_), r_, r_, &one,
                                                 ws_.z.p, int(k_), k_ * r_, ws_.m.p, r_, r_ * r_, &zero, v,
                                                 int(k_), k_ * r_, int(b_)));
    }
    return Status::success();
  }

 private:
  // m = eigenvectors in g scaled by eigenvalue^power (see scaleEigenvectorsKernel).
  Status scaleEigenvectors(float power) {
    const int threads = 256, blocks = (r_ * r_ + threads - 1) / threads;
    scaleEigenvectorsKernel<<<dim3(blocks, unsigned(b_)), threads, 0, st_>>>(ws_.g.p, ws_.eigenvalues.p,
                                                                             ws_.m.p, r_, power);
    MOEWB_CUDA_TRY(cudaGetLastError());
    return Status::success();
  }
  // dst = orth(src) for `rows` x r column-major blocks: G = src^T src = E L E^T, dst = src E L^-1/2.
  Status orth(const float* src, float* dst, int64_t rows) {
    const float one = 1.f, zero = 0.f;
    MOEWB_CUBLAS_TRY(cublasSgemmStridedBatched(h_->blas, CUBLAS_OP_T, CUBLAS_OP_N, r_, r_, int(rows), &one,
                                               src, int(rows), rows * r_, src, int(rows), rows * r_, &zero,
                                               ws_.g.p, r_, r_ * r_, int(b_)));
    MOEWB_STATUS_TRY(eig());
    MOEWB_STATUS_TRY(scaleEigenvectors(-0.5f));
    MOEWB_CUBLAS_TRY(cublasSgemmStridedBatched(h_->blas, CUBLAS_OP_N, CUBLAS_OP_N, int(rows), r_, r_, &one,
                                               src, int(rows), rows * r_, ws_.m.p, r_, r_ * r_, &zero, dst,
                                               int(rows), rows * r_, int(b_)));
    return Status::success();
  }
  // Eigen-decomposition of each r x r Gram matrix in g (vectors overwrite g, values ascending).
  Status eig() {
    for (int64_t b = 0; b < b_; ++b)
      MOEWB_CUSOLVER_TRY(cusolverDnSsyevd(h_->solver, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, r_,
                                          ws_.g.p + b * r_ * r_, r_, ws_.eigenvalues.p + b * r_,
                                          ws_.eig_work.p, lwork_, ws_.info.p));
    return Status::success();
  }

  int64_t b_, n_, k_;
  int r_;
  cudaStream_t st_;
  GpuMiloWorkspace::Buffers& ws_;
  Handles* h_ = nullptr;
  int lwork_ = 0;
};

Status checkArgs(int64_t batch, int64_t n, int64_t k) {
  if (batch < 1 || n < 1 || k < 64 || k % 64)
    return Status::failure(-1, "GPU quantizer: need batch >= 1, n >= 1 and k a positive multiple of 64 (got batch=" +
                                   std::to_string(batch) + " n=" + std::to_string(n) + " k=" + std::to_string(k) + ")");
  std::string why;
  if (!deviceAvailable(&why)) return Status::failure(-1, why);
  return Status::success();
}

}  // namespace

int64_t miloWorkspaceBytes(int64_t batch, int64_t n, int64_t k, int rank) {
  const int64_t r = rank, elements = batch * n * k;
  int64_t bytes = 2 * elements * 4           // target, residual
                  + 2 * (elements / 64) * 4  // scales, zeros when the caller keeps none
                  + 2 * batch * n * r * 4    // P, Q1
                  + 2 * batch * k * r * 4    // Z, Vo
                  + 2 * batch * r * r * 4    // Gram matrices, scaled eigenvectors
                  + batch * r * 4 + 3 * batch * 8;
  // cuSOLVER's syevd workspace is (1 + 6r + 2r^2) floats for eigenvectors; twice that as a margin.
  bytes += 2 * (1 + 6 * r + 2 * r * r) * 4;
  return bytes;
}

Status hqqQuantizeBatched(const float* w, int64_t batch, int64_t n, int64_t k, const GpuHqqOptions& o, uint8_t* codes,
                          float* scales, float* zeros, float* dequant_out, Stream stream) {
  MOEWB_STATUS_TRY(checkArgs(batch, n, k));
  HqqParams p = hqqParams(o, w, batch * n, n, k);
  p.codes = codes;
  p.scales = scales;
  p.zeros = zeros;
  p.dequant = dequant_out;
  return launchHqq(p, detail::toCuda(stream));
}

Status miloCompressBatched(const float* w, int64_t batch, int64_t n, int64_t k, const GpuMiloOptions& o,
                           uint8_t* codes, float* scales, float* zeros, float* u, float* v,
                           GpuMiloReport* report, Stream stream, GpuMiloWorkspace* workspace) {
  MOEWB_STATUS_TRY(checkArgs(batch, n, k));
  if (o.rank < 1 || o.rank > std::min(n, k)) return Status::failure(-1, "MiLo: rank must be 1..min(n, k)");
  if (!o.seeds.empty() && int64_t(o.seeds.size()) != batch)
    return Status::failure(
        -1, "MiLo: " + std::to_string(o.seeds.size()) + " seeds for a batch of " + std::to_string(batch));
  const cudaStream_t st = detail::toCuda(stream);
  GpuMiloWorkspace local;
  GpuMiloWorkspace::Buffers& ws = (workspace ? *workspace : local).buffers();
  std::vector<double> w_sq;
  MOEWB_STATUS_TRY(sumSquaresPerExpert(w, batch, n * k, 256, ws.weight_sq, &w_sq, st));
  MOEWB_STATUS_TRY(ws.target.ensure(batch * n * k));
  MOEWB_STATUS_TRY(ws.resid.ensure(batch * n * k));
  MOEWB_STATUS_TRY(ws.resid_sq.ensure(batch));
  if (!scales) MOEWB_STATUS_TRY(ws.scales.ensure(batch * n * k / 64));
  if (!zeros) MOEWB_STATUS_TRY(ws.zeros.ensure(batch * n * k / 64));
  LowRank lr(batch, n, k, o.rank, st, ws);
  MOEWB_STATUS_TRY(lr.init(o));
  GpuMiloReport rep;
  rep.error_history.resize(size_t(batch));
  const int iterations = std::max(1, o.iterations);
  for (int it = 0; it < iterations; ++it) {
    const bool last = it == iterations - 1;
    const float* to_quantize = w;
    if (it > 0) {
      MOEWB_STATUS_TRY(lr.subtractCompensator(w, ws.target.p));
      to_quantize = ws.target.p;
    }
    HqqParams p = hqqParams(o.hqq, to_quantize, batch * n, n, k);
    p.ref = w;
    p.residual = ws.resid.p;
    p.resid_sq = ws.resid_sq.p;
    p.codes = last ? codes : nullptr;
    p.scales = scales ? scales : ws.scales.p;
    p.zeros = zeros ? zeros : ws.zeros.p;
    MOEWB_CUDA_TRY(cudaMemsetAsync(ws.resid_sq.p, 0, size_t(batch) * sizeof(double), st));
    MOEWB_STATUS_TRY(launchHqq(p, st));
    std::vector<double> r_sq(static_cast<size_t>(batch));
    MOEWB_CUDA_TRY(cudaMemcpyAsync(r_sq.data(), ws.resid_sq.p, size_t(batch) * sizeof(double),
                                   cudaMemcpyDeviceToHost, st));
    const int steps = it == 0 ? std::max(1, o.first_power_steps) : std::max(1, o.power_steps);
    for (int s = 0; s < steps; ++s) MOEWB_STATUS_TRY(lr.step(ws.resid.p));
    std::vector<double> z_sq;
    MOEWB_STATUS_TRY(lr.capturedEnergy(&z_sq));  // synchronises: r_sq has arrived too
    for (int64_t b = 0; b < batch; ++b) {
      if (it == 0) rep.hqq_relative_error.push_back(std::sqrt(r_sq[size_t(b)] / w_sq[size_t(b)]));
      rep.error_history[size_t(b)].push_back(std::sqrt(std::max(0.0, r_sq[size_t(b)] - z_sq[size_t(b)]) / w_sq[size_t(b)]));
    }
  }
  for (int64_t b = 0; b < batch; ++b) rep.relative_error.push_back(rep.error_history[size_t(b)].back());
  if (u || v) MOEWB_STATUS_TRY(lr.factors(u, v));
  MOEWB_CUDA_TRY(cudaStreamSynchronize(st));
  if (report) *report = std::move(rep);
  return Status::success();
}

Status hqqThenLowRankBatched(const float* w, int64_t batch, int64_t n, int64_t k, int rank, int svd_steps,
                             const GpuHqqOptions& o, GpuMiloReport* report, Stream stream) {
  GpuMiloOptions mo;
  mo.rank = rank;
  mo.iterations = 1;
  mo.first_power_steps = std::max(1, svd_steps);
  mo.hqq = o;
  return miloCompressBatched(w, batch, n, k, mo, nullptr, nullptr, nullptr, nullptr, nullptr, report, stream);
}

}  // namespace moewb::gpu

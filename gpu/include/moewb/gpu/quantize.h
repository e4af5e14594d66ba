// SPDX-License-Identifier: MIT
#pragma once
// GPU versions of core's HQQ (moewb::quant::quantizeHqq) and MiLo (HQQ + low-rank compensator), batched
// over experts of one shape: one launch quantizes every group of every expert in the batch, and the
// low-rank steps are strided-batched cuBLAS products. All pointers are device pointers, fp32, row-major.
#include <cstdint>
#include <memory>
#include <vector>

#include "moewb/gpu/device.h"

namespace moewb::gpu {

// Same meaning and defaults as moewb::quant::HqqOptions (3 bits, groups of 64 along a row): scale fixed at
// the min/max one rounded to fp16, zero point by the half-quadratic solver, each group keeps the zero of
// the step with the smallest squared error and stops after `patience` steps without improvement.
struct GpuHqqOptions {
  double lp_norm = 0.7;
  double beta = 10.0;
  double kappa = 1.01;
  int max_steps = 20;
  int patience = 1;
};

// w: [batch][n][k]; codes: [batch][n][k] (0..7); scales, zeros: [batch][n][k/64] (fp16-exact floats).
// `dequant_out` (nullable) receives (code - zero) * scale. k must be a multiple of 64.
Status hqqQuantizeBatched(const float* w, int64_t batch, int64_t n, int64_t k, const GpuHqqOptions& options,
                          uint8_t* codes, float* scales, float* zeros, float* dequant_out, Stream stream);

struct GpuMiloOptions {
  int rank = 32;
  int iterations = 20;         // alternations of "quantize W - UV" and "rank-r fit of the residual"
  int first_power_steps = 4;   // subspace-iteration steps of the first low-rank fit (random start)
  int power_steps = 1;         // steps of each later fit (warm start from the previous subspace)
  GpuHqqOptions hqq;
  uint64_t seed = 1;
  // Per-expert seeds of the random start (size batch): an expert then starts from the same subspace
  // whatever batch it is in, so results do not depend on how a run was cut into batches. Empty: `seed`
  // for the whole batch (expert b's start then depends on b).
  std::vector<uint64_t> seeds;
};

struct GpuMiloReport {
  // Per expert: ||W - (dequant(Q) + U V)||_F / ||W||_F after the last iteration, and after each one.
  std::vector<double> relative_error;
  std::vector<std::vector<double>> error_history;
  // Per expert: ||W - dequant(HQQ(W))|| / ||W|| (the first quantization, before any compensation).
  std::vector<double> hqq_relative_error;
};

// Device scratch memory of miloCompressBatched, kept between calls: buffers grow to the largest call
// seen and are reused, so a run over many batches of one shape allocates once. Not thread-safe; one
// workspace per stream.
class GpuMiloWorkspace {
 public:
  GpuMiloWorkspace();
  ~GpuMiloWorkspace();
  GpuMiloWorkspace(const GpuMiloWorkspace&) = delete;
  GpuMiloWorkspace& operator=(const GpuMiloWorkspace&) = delete;
  int64_t bytes() const;  // device bytes held now
  struct Buffers;         // private to quantize.cu
  Buffers& buffers() { return *buffers_; }

 private:
  std::unique_ptr<Buffers> buffers_;
};

// Device bytes miloCompressBatched needs for one call besides its inputs and outputs (an upper bound).
int64_t miloWorkspaceBytes(int64_t batch, int64_t n, int64_t k, int rank);

// MiLo on a batch of experts. Outputs (each nullable): codes/scales/zeros of the final quantization,
// u [batch][n][rank] and v [batch][rank][k] with the singular values split evenly between them (as core's
// LowRankFactors), so W ~= dequant(Q) + u v. `workspace` (nullable) keeps the scratch memory between
// calls; without one it is allocated and freed by this call.
Status miloCompressBatched(const float* w, int64_t batch, int64_t n, int64_t k, const GpuMiloOptions& options,
                           uint8_t* codes, float* scales, float* zeros, float* u, float* v,
                           GpuMiloReport* report, Stream stream, GpuMiloWorkspace* workspace = nullptr);

// The baseline MiLo is compared with: HQQ, then a rank-r fit of its residual by `svd_steps` subspace
// iterations. Fills report->relative_error (and hqq_relative_error).
Status hqqThenLowRankBatched(const float* w, int64_t batch, int64_t n, int64_t k, int rank, int svd_steps,
                             const GpuHqqOptions& options, GpuMiloReport* report, Stream stream);

}  // namespace moewb::gpu

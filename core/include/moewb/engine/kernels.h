// SPDX-License-Identifier: MIT
#pragma once
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/engine/model_config.h"

namespace moewb::engine {

// The engine's numeric building blocks on the CPU. `linear` is the one place where the engine multiplies
// by weight matrices, so that a GPU backend (cuBLAS) can replace it without touching the model code.

// y[n, out] = x[n, in] * w[out, in]^T (+ bias[out]). Runs on the LinearBackend installed for the calling
// thread (linear_backend.h; MoeEngine::forward installs the engine's), else on the CPU with the rows of x
// split over the worker threads (cpuLinear).
void linear(const float* x, int64_t n, const MatrixRM& w, const float* bias, float* y);
// The same for the weight matrix called `matrix` (its catalog name: a tensor, or "TENSOR[e]" for expert e of
// a fused expert tensor): the calibration tap installed for this thread (ScopedLinearInputTap) sees x first.
void linear(std::string_view matrix, const float* x, int64_t n, const MatrixRM& w, const float* bias, float* y);

// Sees the input of every named weight GEMM on the thread that installed it: x [rows, cols] row-major,
// for MoE experts only the tokens routed to that expert. Calibration passes collect from it.
class LinearInputTap {
 public:
  virtual ~LinearInputTap() = default;
  virtual void onLinearInput(std::string_view matrix, const float* x, int64_t rows, int64_t cols) = 0;
};
// The tap installed for the calling thread, nullptr when none (a forward backend feeds it from the device).
LinearInputTap* currentLinearInputTap();
class ScopedLinearInputTap {
 public:
  explicit ScopedLinearInputTap(LinearInputTap* tap);
  ~ScopedLinearInputTap();
  ScopedLinearInputTap(const ScopedLinearInputTap&) = delete;
  ScopedLinearInputTap& operator=(const ScopedLinearInputTap&) = delete;

 private:
  LinearInputTap* previous_;
};

// RMSNorm of each row (HF: float32 mean of squares, x * rsqrt(var + eps), then times the weight).
void rmsNormRows(const float* x, int64_t n, int64_t dim, const float* weight, double eps, float* y,
                 int64_t x_stride = -1, int64_t y_stride = -1);

// Rotary position embedding tables for positions [0, max_positions): cos/sin [positions, rotary_dim/2],
// already multiplied by the RoPE type's attention factor (YaRN), computed in float32 as HF does.
struct RopeTables {
  int half = 0;
  bool interleaved = false;
  std::vector<float> cos, sin;
};
RopeTables makeRopeTables(const RopeConfig& rope, int64_t max_positions);
// Rotates the first 2*half dims of `heads` head vectors of one token at `position` in place.
void applyRope(const RopeTables& t, float* head_vectors, int heads, int head_stride, int64_t position);

inline float silu(float x) {
  return x / (1.0f + std::exp(-x));
}
// gate[i] = silu(gate[i]) * up[i] (the SwiGLU of HF's MLPs), vectorised.
void siluMul(float* gate, const float* up, int64_t n);

}  // namespace moewb::engine

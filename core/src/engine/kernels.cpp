// SPDX-License-Identifier: MIT
#include "moewb/engine/kernels.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "moewb/engine/linear_backend.h"
#include "moewb/parallel.h"

namespace moewb::engine {

using ConstRowMap = Eigen::Map<const MatrixRM, 0, Eigen::OuterStride<>>;
using RowMap = Eigen::Map<MatrixRM, 0, Eigen::OuterStride<>>;

namespace {
// The backend of the calling thread. linear() is only called from the thread running forward() (the
// workers of parallelFor never multiply by weights), so a thread-local is exactly per forward pass.
thread_local LinearBackend* t_linear_backend = nullptr;
thread_local LinearInputTap* t_linear_input_tap = nullptr;
}  // namespace

LinearInputTap* currentLinearInputTap() {
  return t_linear_input_tap;
}

ScopedLinearInputTap::ScopedLinearInputTap(LinearInputTap* tap) : previous_(t_linear_input_tap) {
  t_linear_input_tap = tap;
}

ScopedLinearInputTap::~ScopedLinearInputTap() {
  t_linear_input_tap = previous_;
}

void linear(std::string_view matrix, const float* x, int64_t n, const MatrixRM& w, const float* bias, float* y) {
  if (LinearInputTap* tap = t_linear_input_tap) tap->onLinearInput(matrix, x, n, w.cols());
  linear(x, n, w, bias, y);
}

LinearBackend* currentLinearBackend() {
  return t_linear_backend;
}

ScopedLinearBackend::ScopedLinearBackend(LinearBackend* backend) : previous_(t_linear_backend) {
  t_linear_backend = backend;
}

ScopedLinearBackend::~ScopedLinearBackend() {
  t_linear_backend = previous_;
}

void linear(const float* x, int64_t n, const MatrixRM& w, const float* bias, float* y) {
  if (LinearBackend* backend = t_linear_backend) {
    backend->linear(x, n, w, bias, y);
    return;
  }
  cpuLinear(x, n, w, bias, y);
}

void cpuLinear(const float* x, int64_t n, const MatrixRM& w, const float* bias, float* y) {
  const int64_t in = w.cols(), out = w.rows();
  // Blocks of rows big enough to keep Eigen's GEMM efficient; one block per thread at most a few times.
  const int threads = workerThreads();
  const int64_t block = std::max<int64_t>(32, (n + threads * 4 - 1) / (threads * 4));
  const int64_t blocks = (n + block - 1) / block;
  auto run = [&](std::size_t b) {
    const int64_t r0 = static_cast<int64_t>(b) * block, rows = std::min(block, n - r0);
    ConstRowMap xb(x + r0 * in, rows, in, Eigen::OuterStride<>(in));
    RowMap yb(y + r0 * out, rows, out, Eigen::OuterStride<>(out));
    yb.noalias() = xb * w.transpose();
    if (bias) yb.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias, out);
  };
  if (blocks <= 1) {
    if (n > 0) run(0);
    return;
  }
  parallelFor(static_cast<std::size_t>(blocks), run);
}

void siluMul(float* gate, const float* up, int64_t n) {
  Eigen::Map<Eigen::ArrayXf> g(gate, n);
  Eigen::Map<const Eigen::ArrayXf> u(up, n);
  g = g / (1.0f + (-g).exp()) * u;
}

void rmsNormRows(const float* x, int64_t n, int64_t dim, const float* weight, double eps, float* y,
                 int64_t x_stride, int64_t y_stride) {
  if (x_stride < 0) x_stride = dim;
  if (y_stride < 0) y_stride = dim;
  const float feps = static_cast<float>(eps);
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    // Float32 mean of squares as torch computes it (pairwise-ish summation is within float rounding).
    double acc = 0;
    for (int64_t i = 0; i < dim; ++i) acc += static_cast<double>(xr[i]) * xr[i];
    const float variance = static_cast<float>(acc / static_cast<double>(dim));
    const float inv = 1.0f / std::sqrt(variance + feps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = weight[i] * (xr[i] * inv);
  }
}

namespace {

// Inverse frequencies and attention factor of each RoPE type, as transformers' ROPE_INIT_FUNCTIONS.
std::vector<float> inverseFrequencies(const RopeConfig& rope, int64_t max_positions,
                                      double* attention_factor) {
  const int dim = rope.rotary_dim;
  const int half = dim / 2;
  double base = rope.theta;
  *attention_factor = 1.0;
  if (rope.type == "dynamic" && rope.original_max_positions > 0 &&
      max_positions > rope.original_max_positions) {
    const double s =
        rope.factor * static_cast<double>(max_positions) / rope.original_max_positions - (rope.factor - 1);
    base = base * std::pow(s, static_cast<double>(dim) / (dim - 2));
  }
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(base), exponent);
  }
  if (rope.type == "linear") {
    for (auto& f : inv) f = static_cast<float>(f / rope.factor);
  } else if (rope.type == "llama3") {
    const double old_len = rope.original_max_positions;
    const double low_wavelen = old_len / rope.low_freq_factor, high_wavelen = old_len / rope.high_freq_factor;
    for (auto& f : inv) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / rope.factor);
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (old_len / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
        f = static_cast<float>((1 - smooth) * f / rope.factor + smooth * f);
      }
    }
  } else if (rope.type == "yarn") {
    auto mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
    if (rope.attention_factor)
      *attention_factor = *rope.attention_factor;
    else if (rope.mscale != 0 && rope.mscale_all_dim != 0)
      *attention_factor = mscale(rope.factor, rope.mscale) / mscale(rope.factor, rope.mscale_all_dim);
    else
      *attention_factor = mscale(rope.factor, 1.0);
    auto correction_dim = [&](double rotations) {
      return dim * std::log(rope.original_max_positions / (rotations * 2 * std::numbers::pi)) /
             (2 * std::log(base));
    };
    double low = correction_dim(rope.beta_fast), high = correction_dim(rope.beta_slow);
    if (rope.truncate) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;
    for (int i = 0; i < half; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double extrapolation_weight = 1.0 - ramp;
      const double extrapolated = inv[i], interpolated = inv[i] / rope.factor;
      inv[i] =
          static_cast<float>(interpolated * (1 - extrapolation_weight) + extrapolated * extrapolation_weight);
    }
  }
  return inv;
}

}  // namespace

RopeTables makeRopeTables(const RopeConfig& rope, int64_t max_positions) {
  RopeTables t;
  t.half = rope.rotary_dim / 2;
  t.interleaved = rope.interleaved;
  double attention_factor = 1.0;
  auto inv = inverseFrequencies(rope, max_positions, &attention_factor);
  t.cos.resize(static_cast<std::size_t>(max_positions) * t.half);
  t.sin.resize(t.cos.size());
  const float af = static_cast<float>(attention_factor);
  for (int64_t p = 0; p < max_positions; ++p)
    for (int i = 0; i < t.half; ++i) {
      const float angle =
          inv[i] * static_cast<float>(p);  // float32 product, as torch's matmul of the outer product
      t.cos[p * t.half + i] = std::cos(angle) * af;
      t.sin[p * t.half + i] = std::sin(angle) * af;
    }
  return t;
}

void applyRope(const RopeTables& t, float* v, int heads, int head_stride, int64_t position) {
  const float* c = t.cos.data() + position * t.half;
  const float* s = t.sin.data() + position * t.half;
  for (int h = 0; h < heads; ++h) {
    float* x = v + static_cast<int64_t>(h) * head_stride;
    if (t.interleaved) {
      for (int i = 0; i < t.half; ++i) {
        const float a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c[i] - b * s[i];
        x[2 * i + 1] = a * s[i] + b * c[i];
      }
    } else {
      for (int i = 0; i < t.half; ++i) {
        const float a = x[i], b = x[i + t.half];
        x[i] = a * c[i] + (-b) * s[i];
        x[i + t.half] = b * c[i] + a * s[i];
      }
    }
  }
}

}  // namespace moewb::engine

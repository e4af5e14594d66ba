// SPDX-License-Identifier: MIT
// One routed expert's MLP for every expert layout the engine runs.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "moe_layer.h"
#include "moewb/engine/kernels.h"

namespace moewb::engine {
namespace {

uint64_t floatBytes(int64_t elements) {
  return static_cast<uint64_t>(elements) * sizeof(float);
}

// gpt-oss (HF GptOssExperts._apply_gate): gate clamped from above, up on both sides, then
// (up + 1) * gate * sigmoid(alpha * gate), all in float32. The result replaces `gate`.
void clampedSwiGlu(float* gate, const float* up, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    const float glu = g * (1.0f / (1.0f + std::exp(-(g * alpha))));
    gate[i] = (u + 1.0f) * glu;
  }
}

}  // namespace

ExpertMlp::ExpertMlp(const ModelConfig& c, const WeightProvider& weights, std::string moe_prefix)
    : c_(c), weights_(weights), prefix_(std::move(moe_prefix)) {
  if (c.expert_bias) {
    const int64_t E = c.num_experts;
    gate_up_bias_ = weights.vector(prefix_ + c.fused_gate_up + "_bias", E * 2 * c.moe_intermediate);
    down_bias_ = weights.vector(prefix_ + c.fused_down + "_bias", E * c.hidden);
  }
}

ExpertMlp::Cost ExpertMlp::run(int expert, const MatrixRM& x, MatrixRM& out) const {
  const int64_t m = x.rows(), H = c_.hidden, I = c_.moe_intermediate;
  MatrixRM gate(m, I), up(m, I);
  Cost cost;
  cost.activation_bytes = floatBytes(gate.size() + up.size() + m * H);
  std::string down_name;
  const float* down_bias = nullptr;
  if (!c_.fused_experts) {
    const std::string ep = fmt::format("{}experts.{}.", prefix_, expert);
    {
      MatrixRM w = weights_.matrix(ep + c_.expert_gate + ".weight", I, H);
      linear(ep + c_.expert_gate + ".weight", x.data(), m, w, nullptr, gate.data());
      cost.weight_bytes += floatBytes(w.size());
    }
    {
      MatrixRM w = weights_.matrix(ep + c_.expert_up + ".weight", I, H);
      linear(ep + c_.expert_up + ".weight", x.data(), m, w, nullptr, up.data());
      cost.weight_bytes += floatBytes(w.size());
    }
    down_name = ep + c_.expert_down + ".weight";
  } else {
    // One GEMM for gate and up together: the slice is one [2I, H] matrix (one WeightMatrix, one
    // quantization unit), split afterwards.
    const std::string slice = fmt::format("[{}]", expert);
    MatrixRM gate_up(m, 2 * I);
    {
      MatrixRM w = weights_.matrix(prefix_ + c_.fused_gate_up + slice, 2 * I, H);
      linear(prefix_ + c_.fused_gate_up + slice, x.data(), m, w,
             gate_up_bias_.empty() ? nullptr : gate_up_bias_.data() + expert * 2 * I, gate_up.data());
      cost.weight_bytes += floatBytes(w.size());
    }
    if (c_.gate_up_interleaved) {
      for (int64_t r = 0; r < m; ++r)
        for (int64_t i = 0; i < I; ++i) {
          gate(r, i) = gate_up(r, 2 * i);
          up(r, i) = gate_up(r, 2 * i + 1);
        }
    } else {
      gate = gate_up.leftCols(I);
      up = gate_up.rightCols(I);
    }
    cost.activation_bytes += floatBytes(gate_up.size());
    down_name = prefix_ + c_.fused_down + slice;
    if (!down_bias_.empty()) down_bias = down_bias_.data() + expert * H;
  }
  if (c_.activation == ExpertActivation::ClampedSwiGLU)
    clampedSwiGlu(gate.data(), up.data(), gate.size(), static_cast<float>(c_.glu_alpha),
                  static_cast<float>(c_.glu_limit));
  else
    siluMul(gate.data(), up.data(), gate.size());
  MatrixRM w = weights_.matrix(down_name, H, I);
  out.resize(m, H);
  linear(down_name, gate.data(), m, w, down_bias, out.data());
  cost.weight_bytes += floatBytes(w.size());
  return cost;
}

}  // namespace moewb::engine

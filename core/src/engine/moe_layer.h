// SPDX-License-Identifier: MIT
#pragma once
// The two halves of an MoE layer that differ between families, kept out of engine.cpp: the router (router
// logits -> chosen experts and weights) and one expert's MLP (per-expert Linear modules or a slice of fused
// 3-D tensors; SwiGLU or gpt-oss's clamped variant; biases).
#include <cstdint>
#include <string>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/engine/model_config.h"
#include "moewb/engine/routing.h"
#include "moewb/engine/weight_provider.h"

namespace moewb::engine {

// Runs the routed experts of one MoE layer. Reads an expert's weights only when run() asks for it, through
// the WeightProvider, by the names replacements are keyed by: "<moe>.experts.<e>.w1.weight" or the fused
// slice "<moe>.experts.gate_up_proj[<e>]".
class ExpertMlp {
 public:
  // moe_prefix: "model.layers.<l>.<moe_module>." Reads the layer's expert biases (gpt-oss) at once.
  ExpertMlp(const ModelConfig& c, const WeightProvider& weights, std::string moe_prefix);
  // What one run() held in float32, for the engine's memory accounting.
  struct Cost {
    uint64_t weight_bytes = 0;      // the expert's matrices
    uint64_t activation_bytes = 0;  // its intermediate buffers and the output
  };
  // out[m, hidden] = expert e applied to x[m, hidden] (without any routing weight).
  Cost run(int expert, const MatrixRM& x, MatrixRM& out) const;

 private:
  const ModelConfig& c_;
  const WeightProvider& weights_;
  std::string prefix_;
  std::vector<float> gate_up_bias_, down_bias_;  // [E, 2I], [E, H] when the experts have biases
};

}  // namespace moewb::engine

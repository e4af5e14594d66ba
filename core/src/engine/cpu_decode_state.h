// SPDX-License-Identifier: MIT
#pragma once
// The CPU engine's KV cache for generation (MoeEngine::newDecodeState without a forward backend).
#include <cstdint>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/engine/forward_backend.h"
#include "moewb/engine/model_config.h"

namespace moewb::engine {

class CpuDecodeState final : public DecodeState {
 public:
  CpuDecodeState(const ModelConfig& c, int sequences)
      : lengths(static_cast<std::size_t>(sequences), 0),
        keys(static_cast<std::size_t>(c.layers), std::vector<MatrixRM>(static_cast<std::size_t>(sequences))),
        values(keys) {}
  int sequences() const override { return static_cast<int>(lengths.size()); }
  int64_t length(int sequence) const override { return lengths.at(static_cast<std::size_t>(sequence)); }
  uint64_t bytes() const override {
    uint64_t b = 0;
    for (const auto* side : {&keys, &values})
      for (const auto& layer : *side)
        for (const auto& m : layer) b += static_cast<uint64_t>(m.size()) * sizeof(float);
    return b;
  }

  std::vector<int64_t> lengths;                   // tokens seen per sequence
  std::vector<std::vector<MatrixRM>> keys, values;  // [layer][sequence]: [tokens, kv_heads * dim] as attended
};

}  // namespace moewb::engine

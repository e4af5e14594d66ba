// SPDX-License-Identifier: MIT
#pragma once
// The CPU engine's KV cache for generation (MoeEngine::newDecodeState without a forward backend): per layer
// and sequence, the keys (after RoPE and the norms) and values of every token seen so far, float32, as the
// attention reads them. With a KV-cache policy (kv_cache.h) the rows hold what the stored format gives back
// (see appendWithKvCachePolicy in kv_cache_decode.h).
#include <cstdint>
#include <string>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/engine/forward_backend.h"
#include "moewb/engine/kernels.h"
#include "moewb/engine/model_config.h"

namespace moewb::engine {

class MoeEngine;

// One layer's cache of one sequence: `rows` tokens of key_width (kv_heads x key dim) and value_width floats.
struct SequenceKvCache {
  std::vector<float> keys, values;  // row-major, what the attention reads
  int64_t rows = 0;
  // With a KV-cache policy: rows [0, settled) are complete chunks already stored in the format the policy
  // chose (settled_bits in the packed layout); rows [settled, rows) wait in fp16 for their chunk to fill
  // and leave the format's residual window, and keep their float32 originals here ([rows - settled, width])
  // so the chunk is quantized from what the model computed, as forward() does.
  int64_t settled = 0;
  uint64_t settled_bits = 0;
  std::vector<float> pending_keys, pending_values;
};

class CpuDecodeState final : public DecodeState {
 public:
  CpuDecodeState(const MoeEngine& owner, const ModelConfig& c, int sequences)
      : owner(&owner),
        lengths(static_cast<std::size_t>(sequences), 0),
        layers(static_cast<std::size_t>(c.layers),
               std::vector<SequenceKvCache>(static_cast<std::size_t>(sequences))) {}
  int sequences() const override { return static_cast<int>(lengths.size()); }
  int64_t length(int sequence) const override { return lengths.at(static_cast<std::size_t>(sequence)); }
  // The float32 rows the cache holds (and the originals of rows waiting for their chunk).
  uint64_t bytes() const override {
    uint64_t b = 0;
    for (const auto& layer : layers)
      for (const auto& s : layer)
        b += static_cast<uint64_t>(s.keys.size() + s.values.size() + s.pending_keys.size() +
                                   s.pending_values.size()) *
             sizeof(float);
    return b;
  }

  const MoeEngine* owner;        // the engine that made it (a cache of another engine is refused)
  std::vector<int64_t> lengths;  // tokens seen per sequence
  std::vector<std::vector<SequenceKvCache>> layers;  // [layer][sequence]
  // A pass that failed or was cancelled half way leaves some layers with the new rows and others without:
  // such a cache is refused afterwards instead of giving wrong attention silently.
  std::string broken;

  // RoPE tables kept between passes: a decoding step needs one new position, not a table rebuilt from 0.
  RopeTables rope;
  int64_t rope_positions = 0;
};

}  // namespace moewb::engine

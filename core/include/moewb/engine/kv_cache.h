// SPDX-License-Identifier: MIT
#pragma once
// The engine's KV-cache hook: a format per (layer, chunk) applied to the keys (after RoPE) and values of
// every layer before the attention uses them (MoeEngine::setKvCachePolicy). Accuracy is simulated as
// MoQAE and KIVI measure it: each chunk is quantized and dequantized in place and attention runs in
// float32 on the result; memory is counted from the packed layout (KvMethod::storedBits).
//
// Chunks: each sequence is cut into chunks of N tokens from its first position. The policy chooses the
// format of every complete chunk; the trailing partial chunk (length mod N tokens) is stored in fp16 for
// every format, as MoQAE does (a chunk is quantized when it is full: the per-channel key statistics need all
// of its tokens), and so is every complete chunk that reaches into its format's residual window (KIVI: the
// last R tokens of the sequence). The cache simulated is the one that holds the whole sequence: every query
// attends to that state, its own recent keys included.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "moewb/engine/engine.h"
#include "moewb/methods/kv_method.h"

namespace moewb::engine {

// What a policy may look at when it chooses a chunk's format (a router reads the chunk's keys).
struct KvChunkContext {
  int layer = 0, sequence = 0;  // sequence: index in the batch
  int64_t chunk = 0;            // index along the sequence: tokens [chunk * N, chunk * N + N)
  int64_t tokens = 0;           // N
  int kv_heads = 0, key_dim = 0, value_dim = 0;
  // Element (t, h, d) of the chunk's keys at keys[t * key_row_stride + h * key_dim + d]; values likewise.
  const float* keys = nullptr;
  const float* values = nullptr;
  int64_t key_row_stride = 0, value_row_stride = 0;
};

class KvCachePolicy {
 public:
  virtual ~KvCachePolicy() = default;
  virtual int chunkTokens() const = 0;  // N
  // The format of one complete chunk. Called on forward()'s thread in (layer, sequence, chunk) order, for
  // all chunks of a layer before any of them is quantized; the reference must outlive the forward pass.
  virtual const methods::KvFormat& formatFor(const KvChunkContext& chunk) const = 0;
  virtual std::string label() const = 0;  // "int4-g32", for reports
};

// One format for every chunk of every layer.
class FixedKvCachePolicy final : public KvCachePolicy {
 public:
  explicit FixedKvCachePolicy(methods::KvSpec spec);
  int chunkTokens() const override { return spec_.chunk_tokens; }
  const methods::KvFormat& formatFor(const KvChunkContext&) const override { return spec_.format; }
  std::string label() const override { return spec_.text.empty() ? spec_.format.label() : spec_.text; }
  const methods::KvSpec& spec() const { return spec_; }

 private:
  methods::KvSpec spec_;
};

// Stored size of (part of) a KV cache: K and V of every layer.
struct KvCacheSize {
  uint64_t bits = 0;
  uint64_t elements = 0;  // float elements of K and V
  double averageBits() const { return elements ? double(bits) / double(elements) : 0.0; }
  uint64_t bytes() const { return (bits + 7) / 8; }
  KvCacheSize& operator+=(const KvCacheSize& o) {
    bits += o.bits;
    elements += o.elements;
    return *this;
  }
};

// Shapes of one layer's cache rows: kv heads and the key / value head sizes (MLA: the per-head keys and
// values the attention uses, not the compressed latent).
struct KvShape {
  int kv_heads = 0, key_dim = 0, value_dim = 0;
};
KvShape kvShape(const ModelConfig& config);

// The cache of one sequence of `length` tokens under one format, all layers (the formula the engine's
// hook follows chunk by chunk).
KvCacheSize kvCacheSize(const ModelConfig& config, const methods::KvFormat& format, int chunk_tokens,
                        int64_t length);

// Applies the policy to one layer's K and V of a batch, in place (K [tokens, kv_heads x key_dim] with
// `key_row_stride`, V likewise); returns what the cache stores. The engine calls it; tests may too.
KvCacheSize applyKvCachePolicy(const KvCachePolicy& policy, int layer, const SequenceBatch& batch,
                               const KvShape& shape, float* keys, int64_t key_row_stride, float* values,
                               int64_t value_row_stride);

// The context length `moewb eval --kv` reports bytes at by default: config.json's max_position_embeddings,
// 32768 when it has none.
int64_t defaultKvContext(const Checkpoint& checkpoint);

// What `moewb eval --kv` reports for one format: {"kv","kv_chunk","kv_avg_bits" (measured over the run),
// "kv_bytes" (one sequence of `length` tokens), "kv_context", "kv_bytes_at_context", "kv_fp16_bytes_at_context"}.
nlohmann::json kvCacheReport(const ModelConfig& config, const FixedKvCachePolicy& policy,
                             const KvCacheSize& measured, int64_t length, int64_t context);

// The policy a KV spec names: a method that chooses per chunk builds its own (`moqae:ROUTER.json`,
// methods::KvMethod::makePolicy), any other spec is one format everywhere (FixedKvCachePolicy). Throws
// moewb::Error quoting the spec.
std::shared_ptr<const KvCachePolicy> makeKvCachePolicy(std::string_view spec);

// kvCacheReport for any policy: a FixedKvCachePolicy as above; a routed one (MoQAE) stores what its
// router chose for the text, so its bytes at `length` and at `context` are projected from the measured
// average bits ("kv_bytes_projected": true).
nlohmann::json kvCacheReport(const ModelConfig& config, const KvCachePolicy& policy, const KvCacheSize& measured,
                             int64_t length, int64_t context);

}  // namespace moewb::engine

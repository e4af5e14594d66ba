// SPDX-License-Identifier: MIT
#include "moewb/engine/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>

#include "moewb/error.h"
#include "moewb/methods/registry.h"
#include "moewb/parallel.h"

namespace moewb::engine {

using methods::KvChunk;
using methods::KvFormat;
using methods::KvTensor;

namespace {

const methods::KvMethod& fp16() {
  return methods::MethodRegistry::instance().getKv("fp16", "KV cache");
}

// Whether complete chunk `c` (tokens [c N, c N + N)) of a sequence of `length` tokens is stored in the
// format's own layout, or in fp16 because it reaches into the format's residual window.
bool quantizedChunk(int64_t c, int64_t n, int64_t length, int64_t residual) {
  return (c + 1) * n <= length - residual;
}

KvCacheSize rowsSize(const methods::KvMethod& m, const methods::KvSettings& s, int64_t tokens, const KvShape& shape) {
  KvCacheSize size;
  size.bits = static_cast<uint64_t>(m.storedBits(KvTensor::Keys, tokens, shape.kv_heads, shape.key_dim, s) +
                                    m.storedBits(KvTensor::Values, tokens, shape.kv_heads, shape.value_dim, s));
  size.elements = static_cast<uint64_t>(tokens * shape.kv_heads * (shape.key_dim + shape.value_dim));
  return size;
}

}  // namespace

FixedKvCachePolicy::FixedKvCachePolicy(methods::KvSpec spec) : spec_(std::move(spec)) {
  if (!spec_.format.method) throw Error("KV cache: a fixed policy without a format");
  if (spec_.chunk_tokens < 1) throw Error(fmt::format("KV cache: chunk of {} tokens", spec_.chunk_tokens));
}

KvShape kvShape(const ModelConfig& c) {
  if (c.mla) return {c.kv_heads, c.qk_nope_dim + c.qk_rope_dim, c.v_head_dim};
  return {c.kv_heads, c.head_dim, c.head_dim};
}

KvCacheSize kvCacheSize(const ModelConfig& config, const KvFormat& format, int chunk_tokens, int64_t length) {
  const KvShape shape = kvShape(config);
  const int64_t residual = format.method->residualTokens(format.settings);
  int64_t quantized = 0;
  for (int64_t c = 0; c < length / chunk_tokens; ++c)
    if (quantizedChunk(c, chunk_tokens, length, residual)) ++quantized;
  KvCacheSize layer;
  for (int64_t c = 0; c < quantized; ++c) layer += rowsSize(*format.method, format.settings, chunk_tokens, shape);
  layer += rowsSize(fp16(), fp16().defaults(), length - quantized * chunk_tokens, shape);
  KvCacheSize all;
  for (int l = 0; l < config.layers; ++l) all += layer;
  return all;
}

KvCacheSize applyKvCachePolicy(const KvCachePolicy& policy, int layer, const SequenceBatch& batch,
                               const KvShape& shape, float* keys, int64_t key_row_stride, float* values,
                               int64_t value_row_stride) {
  struct Piece {
    int64_t row = 0, tokens = 0;  // batch rows [row, row + tokens)
    const KvFormat* format = nullptr;  // nullptr: fp16
  };
  const methods::KvMethod& half = fp16();
  const methods::KvSettings half_settings = half.defaults();
  const int64_t n = policy.chunkTokens();
  std::vector<Piece> pieces;
  for (int s = 0; s < batch.sequences(); ++s) {
    const int64_t off = batch.offsets[s], length = batch.length(s);
    const int64_t full = length / n;
    int64_t fp16_from = full * n;  // the trailing partial chunk
    for (int64_t c = 0; c < full; ++c) {
      KvChunkContext ctx;
      ctx.layer = layer;
      ctx.sequence = s;
      ctx.chunk = c;
      ctx.tokens = n;
      ctx.kv_heads = shape.kv_heads;
      ctx.key_dim = shape.key_dim;
      ctx.value_dim = shape.value_dim;
      ctx.keys = keys + (off + c * n) * key_row_stride;
      ctx.values = values + (off + c * n) * value_row_stride;
      ctx.key_row_stride = key_row_stride;
      ctx.value_row_stride = value_row_stride;
      const KvFormat& format = policy.formatFor(ctx);
      if (!format.method) throw Error(fmt::format("KV cache policy {}: no format for layer {} chunk {}", policy.label(), layer, c));
      if (quantizedChunk(c, n, length, format.method->residualTokens(format.settings)))
        pieces.push_back({off + c * n, n, &format});
      else
        fp16_from = std::min(fp16_from, c * n);
    }
    // Chunks after a residual chunk are in the window too (the window is the sequence's tail).
    std::erase_if(pieces, [&](const Piece& p) { return p.row >= off + fp16_from && p.row < off + length; });
    if (fp16_from < length) pieces.push_back({off + fp16_from, length - fp16_from, nullptr});
  }
  std::vector<KvCacheSize> sizes(pieces.size());
  parallelFor(pieces.size(), [&](std::size_t i) {
    const Piece& p = pieces[i];
    const methods::KvMethod& m = p.format ? *p.format->method : half;
    const methods::KvSettings& s = p.format ? p.format->settings : half_settings;
    m.quantizeChunk(KvChunk{keys + p.row * key_row_stride, p.tokens, shape.kv_heads, shape.key_dim, key_row_stride,
                            KvTensor::Keys},
                    s);
    m.quantizeChunk(KvChunk{values + p.row * value_row_stride, p.tokens, shape.kv_heads, shape.value_dim,
                            value_row_stride, KvTensor::Values},
                    s);
    sizes[i] = rowsSize(m, s, p.tokens, shape);
  });
  KvCacheSize total;
  for (const auto& s : sizes) total += s;
  return total;
}

int64_t defaultKvContext(const Checkpoint& checkpoint) {
  const auto& cfg = checkpoint.config();
  const auto it = cfg.find("max_position_embeddings");
  if (it != cfg.end() && it->is_number_integer() && it->get<int64_t>() > 0) return it->get<int64_t>();
  return 32768;
}

nlohmann::json kvCacheReport(const ModelConfig& config, const FixedKvCachePolicy& policy,
                             const KvCacheSize& measured, int64_t length, int64_t context) {
  const KvFormat& format = policy.spec().format;
  const KvFormat half{&fp16(), fp16().defaults()};
  const KvCacheSize at_length = kvCacheSize(config, format, policy.chunkTokens(), length);
  const KvCacheSize at_context = kvCacheSize(config, format, policy.chunkTokens(), context);
  return {{"kv", policy.label()},
          {"kv_format", format.label()},
          {"kv_chunk", policy.chunkTokens()},
          {"kv_avg_bits", measured.elements ? measured.averageBits() : at_length.averageBits()},
          {"kv_bytes", at_length.bytes()},
          {"kv_context", context},
          {"kv_bytes_at_context", at_context.bytes()},
          {"kv_fp16_bytes_at_context", kvCacheSize(config, half, policy.chunkTokens(), context).bytes()}};
}

}  // namespace moewb::engine

// SPDX-License-Identifier: MIT
#include "kv_cache_decode.h"

#include <fmt/format.h>

#include "moewb/error.h"
#include "moewb/methods/registry.h"

namespace moewb::engine {

namespace {

void appendRows(std::vector<float>& to, const float* rows, int64_t stride, int64_t tokens, int64_t width) {
  to.reserve(to.size() + static_cast<std::size_t>(tokens * width));
  for (int64_t t = 0; t < tokens; ++t) to.insert(to.end(), rows + t * stride, rows + t * stride + width);
}

uint64_t rowBits(const methods::KvMethod& m, const methods::KvSettings& s, int64_t tokens,
                 const KvShape& shape) {
  return static_cast<uint64_t>(
      m.storedBits(methods::KvTensor::Keys, tokens, shape.kv_heads, shape.key_dim, s) +
      m.storedBits(methods::KvTensor::Values, tokens, shape.kv_heads, shape.value_dim, s));
}

}  // namespace

KvCacheSize appendWithKvCachePolicy(const KvCachePolicy* policy, int layer, int sequence,
                                    const KvShape& shape, SequenceKvCache& cache, const float* keys,
                                    int64_t key_row_stride, const float* values, int64_t value_row_stride,
                                    int64_t tokens) {
  const int64_t kw = int64_t(shape.kv_heads) * shape.key_dim, vw = int64_t(shape.kv_heads) * shape.value_dim;
  const int64_t old_rows = cache.rows;
  appendRows(cache.keys, keys, key_row_stride, tokens, kw);
  appendRows(cache.values, values, value_row_stride, tokens, vw);
  cache.rows += tokens;
  if (!policy) return {};

  const methods::KvMethod& half = methods::MethodRegistry::instance().getKv("fp16", "KV cache");
  const methods::KvSettings half_settings = half.defaults();
  appendRows(cache.pending_keys, keys, key_row_stride, tokens, kw);
  appendRows(cache.pending_values, values, value_row_stride, tokens, vw);

  // Complete chunks leave the fp16 tail in order, each quantized from its float32 originals; the first one
  // still inside its format's residual window stops the walk (the window is the sequence's tail).
  const int64_t n = policy->chunkTokens();
  const int64_t length = cache.rows;
  while (cache.settled + n <= length) {
    const int64_t row = cache.settled;  // first row of the chunk
    const int64_t pending_row = row - (length - static_cast<int64_t>(cache.pending_keys.size()) / kw);
    KvChunkContext ctx;
    ctx.layer = layer;
    ctx.sequence = sequence;
    ctx.chunk = row / n;
    ctx.tokens = n;
    ctx.kv_heads = shape.kv_heads;
    ctx.key_dim = shape.key_dim;
    ctx.value_dim = shape.value_dim;
    ctx.keys = cache.pending_keys.data() + pending_row * kw;
    ctx.values = cache.pending_values.data() + pending_row * vw;
    ctx.key_row_stride = kw;
    ctx.value_row_stride = vw;
    const methods::KvFormat& format = policy->formatFor(ctx);
    if (!format.method)
      throw Error(fmt::format("KV cache policy {}: no format for layer {} chunk {}", policy->label(), layer,
                              ctx.chunk));
    if (row + n > length - format.method->residualTokens(format.settings)) break;
    float* k = cache.keys.data() + row * kw;
    float* v = cache.values.data() + row * vw;
    std::copy(ctx.keys, ctx.keys + n * kw, k);
    std::copy(ctx.values, ctx.values + n * vw, v);
    format.method->quantizeChunk({k, n, shape.kv_heads, shape.key_dim, kw, methods::KvTensor::Keys},
                                 format.settings);
    format.method->quantizeChunk({v, n, shape.kv_heads, shape.value_dim, vw, methods::KvTensor::Values},
                                 format.settings);
    cache.settled_bits += rowBits(*format.method, format.settings, n, shape);
    cache.settled += n;
  }
  // Originals are kept only for the rows still waiting.
  const int64_t waiting = length - cache.settled;
  cache.pending_keys.erase(cache.pending_keys.begin(), cache.pending_keys.end() - waiting * kw);
  cache.pending_values.erase(cache.pending_values.begin(), cache.pending_values.end() - waiting * vw);
  // The new rows still waiting are stored in fp16 (older waiting rows were rounded when they arrived).
  const int64_t from = std::max(old_rows, cache.settled);
  if (from < length) {
    half.quantizeChunk({cache.keys.data() + from * kw, length - from, shape.kv_heads, shape.key_dim, kw,
                        methods::KvTensor::Keys},
                       half_settings);
    half.quantizeChunk({cache.values.data() + from * vw, length - from, shape.kv_heads, shape.value_dim, vw,
                        methods::KvTensor::Values},
                       half_settings);
  }
  KvCacheSize size;
  size.bits = cache.settled_bits + rowBits(half, half_settings, waiting, shape);
  size.elements = static_cast<uint64_t>(length * (kw + vw));
  return size;
}

}  // namespace moewb::engine

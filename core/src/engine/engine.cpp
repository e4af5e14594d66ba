// SPDX-License-Identifier: MIT
#include "moewb/engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "cpu_decode_state.h"
#include "kv_cache_decode.h"
#include "moe_layer.h"
#include "moewb/engine/kernels.h"
#include "moewb/engine/kv_cache.h"
#include "moewb/error.h"
#include "moewb/parallel.h"

namespace moewb::engine {

using ConstRowMap = Eigen::Map<const MatrixRM, 0, Eigen::OuterStride<>>;
using RowMap = Eigen::Map<MatrixRM, 0, Eigen::OuterStride<>>;

void SequenceBatch::add(std::span<const int32_t> sequence) {
  ids.insert(ids.end(), sequence.begin(), sequence.end());
  offsets.push_back(static_cast<int64_t>(ids.size()));
}

struct MoeEngine::Buffers {
  const SequenceBatch* batch = nullptr;
  int64_t n = 0;
  MatrixRM x;       // residual stream [n, hidden]: the contiguous activation buffer all sequences share
  MatrixRM normed;  // normalised input of the current block
  RopeTables own_rope;
  const RopeTables* rope = &own_rope;  // the pass's own, or the KV cache's (generation)
  std::vector<int64_t> position;       // absolute position of each token within its sequence
  // Generation (extend): the KV cache the new tokens continue, and the tokens it held per sequence before
  // this pass. nullptr for forward().
  CpuDecodeState* cache = nullptr;
  std::vector<int64_t> past;
  uint64_t base_bytes() const { return static_cast<uint64_t>(x.size() + normed.size()) * sizeof(float); }
};

namespace {

// Throws moewb::Error naming the first id outside [0, vocab): checked once per pass by forward() and
// extend(), before the pass goes to the CPU engine or a forward backend.
void checkTokenIds(const SequenceBatch& batch, int vocab) {
  for (int32_t id : batch.ids)
    if (id < 0 || id >= vocab)
      throw Error(fmt::format("token id {} is outside the model's vocabulary (vocab_size {})", id, vocab));
}

uint64_t floatBytes(int64_t elements) {
  return static_cast<uint64_t>(elements) * sizeof(float);
}

void notePeak(uint64_t& peak, uint64_t value) {
  peak = std::max(peak, value);
}

// Row softmax of scores[i, lo..i] (scaled), zeros elsewhere; float32 like HF's eager attention. With a
// sink (gpt-oss) the sink logit joins the row's max and normaliser and is then dropped, so the row sums to
// less than one.
void causalSoftmaxRow(float* row, int64_t i, int64_t lo, int64_t length, float scale, const float* sink) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = lo; j <= i; ++j) {
    row[j] *= scale;
    mx = std::max(mx, row[j]);
  }
  if (sink) mx = std::max(mx, *sink);
  double sum = sink ? std::exp(*sink - mx) : 0.0;
  for (int64_t j = lo; j <= i; ++j) {
    row[j] = std::exp(row[j] - mx);
    sum += row[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < lo; ++j) row[j] = 0;
  for (int64_t j = lo; j <= i; ++j) row[j] *= inv;
  for (int64_t j = i + 1; j < length; ++j) row[j] = 0;
}

// First key position query position i of a sequence may attend to: the sliding window keeps the last
// `sliding_window` positions (HF: kv > q - window), chunked attention the query's own chunk.
int64_t firstVisibleKey(const LayerAttention& a, int64_t i) {
  int64_t lo = 0;
  if (a.sliding_window > 0) lo = std::max<int64_t>(lo, i - a.sliding_window + 1);
  if (a.chunk > 0) lo = std::max<int64_t>(lo, i - i % a.chunk);
  return lo;
}

// The state's RoPE tables, grown to cover positions [0, positions). Tables of most RoPE types do not depend
// on how many positions they cover, so they are kept and grown by doubling; dynamic NTK scaling past the
// original context depends on the current length (as in HF, which recomputes its frequencies from the
// longest sequence every step), so it is rebuilt for exactly `positions` then.
const RopeTables& decodeRope(CpuDecodeState& state, const RopeConfig& rope, int64_t positions) {
  const bool length_dependent = rope.type == "dynamic" && rope.original_max_positions > 0;
  if (length_dependent && positions > rope.original_max_positions) {
    state.rope = makeRopeTables(rope, positions);
    state.rope_positions = -1;  // not reused: the next step has another length
    return state.rope;
  }
  if (state.rope_positions >= positions) return state.rope;
  int64_t size = std::max<int64_t>({positions, 2 * state.rope_positions, 256});
  if (length_dependent) size = std::min<int64_t>(size, rope.original_max_positions);
  state.rope = makeRopeTables(rope, size);
  state.rope_positions = size;
  return state.rope;
}

// Adds a block's output to the residual stream; Granite scales it first (residual + out * multiplier).
void addResidual(MatrixRM& x, const MatrixRM& out, double multiplier) {
  if (multiplier == 1.0)
    x += out;
  else
    x += out * static_cast<float>(multiplier);
}

}  // namespace

MoeEngine::MoeEngine(std::shared_ptr<const Checkpoint> ckpt, std::shared_ptr<const WeightProvider> weights)
    : ckpt_(std::move(ckpt)), config_(parseModelConfig(*ckpt_)) {
  weights_ = weights ? std::move(weights) : std::make_shared<CheckpointWeights>(ckpt_);
}

std::unique_ptr<MoeEngine> MoeEngine::open(const std::string& path) {
  return std::make_unique<MoeEngine>(Checkpoint::open(path));
}

void MoeEngine::setWeights(std::shared_ptr<const WeightProvider> weights) {
  weights_ = weights ? std::move(weights) : std::make_shared<CheckpointWeights>(ckpt_);
}

uint64_t MoeEngine::layerWeightBytes(int layer) const {
  const std::string prefix = fmt::format("model.layers.{}.", layer);
  uint64_t b = 0;
  for (const auto& t : ckpt_->tensors())
    if (t.name.compare(0, prefix.size(), prefix) == 0) b += floatBytes(t.numel());
  return b;
}

uint64_t MoeEngine::embeddingAndHeadBytes() const {
  uint64_t b = 0;
  for (const char* name : {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"})
    if (auto i = ckpt_->find(name)) b += floatBytes(ckpt_->tensor(*i).numel());
  return b;
}

std::string MoeEngine::forwardFallbackReason() const {
  const std::lock_guard lock(fallback_mutex_);
  return forward_fallback_reason_;
}

double MoeEngine::prepareBackend(const SequenceBatch* typical) const {
  if (!forward_backend_) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  forward_backend_->prepare(*this, typical);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

ForwardStats MoeEngine::forward(const SequenceBatch& batch, ForwardObserver& observer,
                                ProgressReporter* progress, double progress_begin,
                                double progress_span) const {
  checkTokenIds(batch, config_.vocab);  // once, before whichever backend runs the pass
  if (forward_backend_) {
    std::string why = forward_backend_->unsupported(*this, observer);
    {
      const std::lock_guard lock(fallback_mutex_);
      forward_fallback_reason_ = why;
    }
    if (why.empty())
      return forward_backend_->forward(*this, batch, observer, nullptr, progress, progress_begin,
                                       progress_span);
  }
  return cpuForward(batch, observer, nullptr, progress, progress_begin, progress_span);
}

std::unique_ptr<DecodeState> MoeEngine::newDecodeState(int sequences) const {
  if (sequences < 1) throw Error(fmt::format("a generation needs at least one sequence, not {}", sequences));
  if (forward_backend_) return forward_backend_->newDecodeState(*this, sequences);
  return std::make_unique<CpuDecodeState>(*this, config_, sequences);
}

ForwardStats MoeEngine::extend(DecodeState& state, const SequenceBatch& batch, ForwardObserver& observer,
                               ProgressReporter* progress) const {
  if (batch.sequences() != state.sequences())
    throw Error(fmt::format("a decoding step has {} sequences but its KV cache {}", batch.sequences(),
                            state.sequences()));
  checkTokenIds(batch, config_.vocab);
  if (auto* cpu = dynamic_cast<CpuDecodeState*>(&state))
    return cpuForward(batch, observer, cpu, progress, 0, 1);
  if (!forward_backend_) throw Error("this KV cache was made by a forward backend the engine no longer has");
  if (std::string why = forward_backend_->unsupported(*this, observer); !why.empty())
    throw Error(fmt::format("generation on {}: {}", forward_backend_->name(), why));
  return forward_backend_->forward(*this, batch, observer, &state, progress, 0, 1);
}

// Generation on the CPU (state != nullptr): the pass runs the new tokens only. Their positions continue at
// state->lengths[s]; each layer appends their K (after RoPE and the norms, and after the KV-cache policy,
// see kv_cache_decode.h) and V to the cache, and the new queries attend to cached + new keys with the
// masks of forward() at absolute positions (causal, sliding window, Llama-4 chunks, sinks; NoPE temperature
// tuning at the absolute position). The cache keeps every token, also those a sliding window no longer
// shows: masks, not eviction, decide what is visible, as in forward().
// Observers with a cache: onRouting and onLogits see the new tokens' rows only; onKeysValues gets the new
// rows as the cache stores them after this pass (length = new tokens); onAttention is not called (its
// [length, length] contract has no room for [new, cached + new] rows) and an observer that wants it is
// refused by the check at the top.
ForwardStats MoeEngine::cpuForward(const SequenceBatch& batch, ForwardObserver& observer,
                                   CpuDecodeState* state, ProgressReporter* progress, double progress_begin,
                                   double progress_span) const {
  if (state) {
    if (state->owner != this) throw Error("this KV cache was made by another engine");
    if (!state->broken.empty())
      throw Error(fmt::format("this KV cache is incomplete ({}): start a new generation", state->broken));
    if (observer.wantsAttention())
      throw Error(
          "attention probabilities are reported by forward() only, not by a generation step (extend): "
          "run the whole sequence through forward() to see them");
  }
  ForwardStats stats;
  // Every engine::linear() of this pass (on this thread) runs on the engine's backend; CPU when none.
  const ScopedLinearBackend gemm_backend(linear_backend_.get());
  Buffers buf;
  buf.batch = &batch;
  buf.n = batch.tokens();
  if (buf.n == 0) return stats;
  buf.cache = state;
  buf.past.assign(static_cast<std::size_t>(batch.sequences()), 0);
  if (state) buf.past = state->lengths;
  int64_t max_len = 0;  // positions the RoPE table must cover
  buf.position.resize(buf.n);
  for (int s = 0; s < batch.sequences(); ++s) {
    max_len = std::max(max_len, buf.past[s] + batch.length(s));
    for (int64_t t = 0; t < batch.length(s); ++t) buf.position[batch.offsets[s] + t] = buf.past[s] + t;
  }
  if (state) {
    buf.rope = &decodeRope(*state, config_.rope, max_len);
  } else {
    buf.own_rope = makeRopeTables(config_.rope, max_len);
  }
  buf.x.resize(buf.n, config_.hidden);
  buf.normed.resize(buf.n, config_.hidden);
  weights_->embeddingRows("model.embed_tokens.weight", batch.ids, config_.hidden, buf.x.data());
  if (config_.embedding_multiplier != 1.0)
    buf.x *= static_cast<float>(config_.embedding_multiplier);  // Granite

  const int steps = config_.layers + 1;
  auto report = [&](int done, const std::string& stage) {
    if (!progress) return;
    if (!progress->report(progress_begin + progress_span * done / steps, stage)) throw Cancelled{};
  };
  try {
    for (int layer = 0; layer < config_.layers; ++layer) {
      if (progress) progress->check();
      attentionStep(layer, batch, buf, observer, stats);
      mlpStep(layer, batch, buf, observer, stats);
      report(layer + 1, fmt::format("layer {}/{}", layer + 1, config_.layers));
    }
  } catch (const Cancelled&) {
    if (state) state->broken = "a generation step was cancelled";
    throw;
  } catch (const std::exception& e) {
    if (state) state->broken = fmt::format("a generation step failed: {}", e.what());
    throw;
  }
  if (state) {
    // Every layer has the new rows: the cache now holds them.
    for (int s = 0; s < batch.sequences(); ++s) state->lengths[s] += batch.length(s);
  }
  if (observer.wantsLogits()) headStep(buf, observer, stats);
  report(steps, "head");
  return stats;
}

void MoeEngine::attentionStep(int layer, const SequenceBatch& batch, Buffers& buf, ForwardObserver& observer,
                              ForwardStats& stats) const {
  const ModelConfig& c = config_;
  const std::string pre = fmt::format("model.layers.{}.self_attn.", layer);
  const int64_t n = buf.n, H = c.hidden;
  {
    auto w = weights_->vector(fmt::format("model.layers.{}.input_layernorm.weight", layer), H);
    rmsNormRows(buf.x.data(), n, H, w.data(), c.norm_eps, buf.normed.data());
  }
  const int heads = c.heads, kvh = c.kv_heads;
  const int dq = c.mla ? c.qk_nope_dim + c.qk_rope_dim : c.head_dim;  // query/key head size
  const int dv = c.mla ? c.v_head_dim : c.head_dim;
  const int64_t qs = static_cast<int64_t>(heads) * dq, ks = static_cast<int64_t>(kvh) * dq,
                vs = static_cast<int64_t>(kvh) * dv;
  MatrixRM Q(n, qs), K(n, ks), V(n, vs);
  uint64_t weight_bytes = 0;
  auto project = [&](const std::string& name, int64_t rows, int64_t cols, const float* x, float* y,
                     bool bias) {
    const std::string matrix = pre + name + ".weight";
    MatrixRM w = weights_->matrix(matrix, rows, cols);
    weight_bytes = std::max<uint64_t>(weight_bytes, floatBytes(w.size()));
    std::vector<float> b;
    if (bias) b = weights_->vector(pre + name + ".bias", rows);
    linear(matrix, x, n, w, bias ? b.data() : nullptr, y);
  };
  uint64_t extra_bytes = 0;

  if (!c.mla) {
    project("q_proj", qs, H, buf.normed.data(), Q.data(), c.qkv_bias);
    project("k_proj", ks, H, buf.normed.data(), K.data(), c.qkv_bias);
    project("v_proj", vs, H, buf.normed.data(), V.data(), c.qkv_bias);
    if (c.qk_norm == ModelConfig::QkNorm::PerHead) {
      auto qn = weights_->vector(pre + "q_norm.weight", dq);
      auto kn = weights_->vector(pre + "k_norm.weight", dq);
      rmsNormRows(Q.data(), n * heads, dq, qn.data(), c.norm_eps, Q.data());
      rmsNormRows(K.data(), n * kvh, dq, kn.data(), c.norm_eps, K.data());
    } else if (c.qk_norm == ModelConfig::QkNorm::WholeProjection) {
      auto qn = weights_->vector(pre + "q_norm.weight", qs);
      auto kn = weights_->vector(pre + "k_norm.weight", ks);
      rmsNormRows(Q.data(), n, qs, qn.data(), c.norm_eps, Q.data());
      rmsNormRows(K.data(), n, ks, kn.data(), c.norm_eps, K.data());
    }
    if (c.clip_qkv) {
      const float clip = static_cast<float>(*c.clip_qkv);
      for (MatrixRM* m : {&Q, &K, &V}) *m = m->cwiseMax(-clip).cwiseMin(clip);
    }
    const bool rope = c.layer_attention[layer].rope;
    if (rope) {
      for (int64_t t = 0; t < n; ++t) {
        applyRope(*buf.rope, Q.data() + t * qs, heads, dq, buf.position[t]);
        applyRope(*buf.rope, K.data() + t * ks, kvh, dq, buf.position[t]);
      }
    }
    // Llama 4 normalises q and k after rotating them (HF Llama4TextL2Norm: x * rsqrt(mean(x^2) + eps),
    // no weight), and only on RoPE layers.
    if (c.qk_norm == ModelConfig::QkNorm::L2AfterRope && rope) {
      const std::vector<float> ones(dq, 1.0f);
      rmsNormRows(Q.data(), n * heads, dq, ones.data(), c.norm_eps, Q.data());
      rmsNormRows(K.data(), n * kvh, dq, ones.data(), c.norm_eps, K.data());
    }
    // Llama 4 NoPE layers sharpen attention with distance: queries scaled by
    // log1p(floor((p + 1) / floor_scale)) * attn_scale + 1, in float32 as HF.
    if (c.temperature_tuning && !rope) {
      const float floor_scale = static_cast<float>(c.floor_scale),
                  attn_scale = static_cast<float>(c.attn_scale);
      for (int64_t t = 0; t < n; ++t) {
        const float p = static_cast<float>(buf.position[t]);
        const float s = std::log1p(std::floor((p + 1.0f) / floor_scale)) * attn_scale + 1.0f;
        Q.row(t) *= s;
      }
    }
  } else {
    // Multi-head latent attention: queries (optionally through a low-rank bottleneck) and a compressed KV
    // latent expanded per head; the RoPE part of the key is shared by all heads. HF's MLA norms use their
    // default eps 1e-6, not rms_norm_eps.
    constexpr double kLatentNormEps = 1e-6;
    const int nope = c.qk_nope_dim, rope = c.qk_rope_dim, lora = c.kv_lora_rank;
    if (c.q_lora_rank > 0) {
      MatrixRM qa(n, c.q_lora_rank);
      project("q_a_proj", c.q_lora_rank, H, buf.normed.data(), qa.data(),
              weights_->contains(pre + "q_a_proj.bias"));
      auto qn = weights_->vector(pre + "q_a_layernorm.weight", c.q_lora_rank);
      rmsNormRows(qa.data(), n, c.q_lora_rank, qn.data(), kLatentNormEps, qa.data());
      MatrixRM w = weights_->matrix(pre + "q_b_proj.weight", qs, c.q_lora_rank);
      linear(pre + "q_b_proj.weight", qa.data(), n, w, nullptr, Q.data());
      extra_bytes += floatBytes(qa.size());
    } else {
      project("q_proj", qs, H, buf.normed.data(), Q.data(), false);
    }
    MatrixRM ckv(n, lora + rope);
    project("kv_a_proj_with_mqa", lora + rope, H, buf.normed.data(), ckv.data(),
            weights_->contains(pre + "kv_a_proj_with_mqa.bias"));
    MatrixRM latent(n, lora);
    auto kvn = weights_->vector(pre + "kv_a_layernorm.weight", lora);
    rmsNormRows(ckv.data(), n, lora, kvn.data(), kLatentNormEps, latent.data(), lora + rope, lora);
    const int64_t per_head = nope + dv;
    MatrixRM kvb(n, heads * per_head);
    {
      MatrixRM w = weights_->matrix(pre + "kv_b_proj.weight", heads * per_head, lora);
      linear(pre + "kv_b_proj.weight", latent.data(), n, w, nullptr, kvb.data());
    }
    extra_bytes += floatBytes(ckv.size() + latent.size() + kvb.size());
    for (int64_t t = 0; t < n; ++t) {
      float* k_pe = ckv.data() + t * (lora + rope) + lora;
      applyRope(*buf.rope, k_pe, 1, rope, buf.position[t]);
      applyRope(*buf.rope, Q.data() + t * qs + nope, heads, dq, buf.position[t]);
      for (int h = 0; h < heads; ++h) {
        const float* src = kvb.data() + t * heads * per_head + h * per_head;
        float* kd = K.data() + t * ks + static_cast<int64_t>(h) * dq;
        std::copy(src, src + nope, kd);
        std::copy(k_pe, k_pe + rope, kd + nope);
        std::copy(src + nope, src + per_head, V.data() + t * vs + static_cast<int64_t>(h) * dv);
      }
    }
  }

  // The KV cache as stored: each chunk's keys and values replaced by what its format gives back. In a
  // generation step the new rows join the cache first (kv_cache_decode.h); with a policy the stats then
  // count what the whole cache stores after this pass, forward()'s what the pass's sequences store.
  if (buf.cache) {
    for (int s = 0; s < batch.sequences(); ++s) {
      const int64_t off = batch.offsets[s];
      const KvCacheSize stored = appendWithKvCachePolicy(kv_policy_.get(), layer, s, KvShape{kvh, dq, dv},
                                                         buf.cache->layers[layer][s], K.data() + off * ks, ks,
                                                         V.data() + off * vs, vs, batch.length(s));
      stats.kv_stored_bits += stored.bits;
      stats.kv_elements += stored.elements;
    }
  } else if (kv_policy_) {
    const KvCacheSize stored =
        applyKvCachePolicy(*kv_policy_, layer, batch, KvShape{kvh, dq, dv}, K.data(), ks, V.data(), vs);
    stats.kv_stored_bits += stored.bits;
    stats.kv_elements += stored.elements;
  }
  // Where sequence s's keys and values start (row 0 of the sequence) and how many rows precede the pass's
  // tokens: the cache in a generation step, the pass's own K and V otherwise.
  auto keyRows = [&](int s) -> const float* {
    return buf.cache ? buf.cache->layers[layer][s].keys.data() : K.data() + batch.offsets[s] * ks;
  };
  auto valueRows = [&](int s) -> const float* {
    return buf.cache ? buf.cache->layers[layer][s].values.data() : V.data() + batch.offsets[s] * vs;
  };

  if (observer.wantsKeysValues()) {
    for (int s = 0; s < batch.sequences(); ++s) {
      KeyValueView kv;
      kv.layer = layer;
      kv.sequence = s;
      kv.length = batch.length(s);
      kv.kv_heads = kvh;
      kv.key_dim = dq;
      kv.value_dim = dv;
      kv.keys = keyRows(s) + buf.past[s] * ks;  // the new tokens' rows, as stored
      kv.values = valueRows(s) + buf.past[s] * vs;
      kv.key_row_stride = ks;
      kv.value_row_stride = vs;
      observer.onKeysValues(kv);
    }
  }

  // Softmax attention per (sequence, head), causal (and sliding-window / chunked where configured): the
  // T new queries of a sequence against its L = past + T keys, query i at absolute position past + i.
  const int64_t os = static_cast<int64_t>(heads) * dv;
  MatrixRM attn_out(n, os);
  const float scale = static_cast<float>(c.attention_scale);
  const int group = heads / kvh;
  const bool want_probs = observer.wantsAttention();  // never with a cache (refused in cpuForward)
  const LayerAttention& mask = c.layer_attention[layer];
  std::vector<float> sinks;
  if (c.attention_sinks) sinks = weights_->vector(pre + "sinks", heads);
  parallelFor(static_cast<std::size_t>(batch.sequences()) * heads, [&](std::size_t item) {
    const int s = static_cast<int>(item / heads), h = static_cast<int>(item % heads), g = h / group;
    const int64_t off = batch.offsets[s], T = batch.length(s), past = buf.past[s], L = past + T;
    if (T == 0) return;
    ConstRowMap q(Q.data() + off * qs + static_cast<int64_t>(h) * dq, T, dq, Eigen::OuterStride<>(qs));
    ConstRowMap k(keyRows(s) + static_cast<int64_t>(g) * dq, L, dq, Eigen::OuterStride<>(ks));
    ConstRowMap v(valueRows(s) + static_cast<int64_t>(g) * dv, L, dv, Eigen::OuterStride<>(vs));
    MatrixRM scores(T, L);
    scores.noalias() = q * k.transpose();
    const float* sink = sinks.empty() ? nullptr : &sinks[h];
    for (int64_t i = 0; i < T; ++i)
      causalSoftmaxRow(scores.data() + i * L, past + i, firstVisibleKey(mask, past + i), L, scale, sink);
    if (want_probs) observer.onAttention(layer, s, h, scores.data(), T);
    RowMap out(attn_out.data() + off * os + static_cast<int64_t>(h) * dv, T, dv, Eigen::OuterStride<>(os));
    if (past == 0)
      out.noalias() = scores.triangularView<Eigen::Lower>() * v;
    else
      out.noalias() = scores * v;  // masked keys are zero in the row
  });

  MatrixRM projected(n, H);
  project("o_proj", H, os, attn_out.data(), projected.data(), c.o_bias);
  addResidual(buf.x, projected, c.residual_multiplier);
  notePeak(stats.peak_weight_bytes, weight_bytes);
  notePeak(stats.peak_activation_bytes,
           buf.base_bytes() +
               floatBytes(Q.size() + K.size() + V.size() + attn_out.size() + projected.size()) + extra_bytes);
}

void MoeEngine::denseMlp(const std::string& prefix, int64_t intermediate, const float* x, int64_t n,
                         float* out, ForwardStats& stats) const {
  const int64_t H = config_.hidden;
  MatrixRM gate(n, intermediate), up(n, intermediate);
  {
    MatrixRM wg = weights_->matrix(prefix + "gate_proj.weight", intermediate, H);
    linear(prefix + "gate_proj.weight", x, n, wg, nullptr, gate.data());
  }
  {
    MatrixRM wu = weights_->matrix(prefix + "up_proj.weight", intermediate, H);
    linear(prefix + "up_proj.weight", x, n, wu, nullptr, up.data());
  }
  siluMul(gate.data(), up.data(), gate.size());
  MatrixRM wd = weights_->matrix(prefix + "down_proj.weight", H, intermediate);
  linear(prefix + "down_proj.weight", gate.data(), n, wd, nullptr, out);
  notePeak(stats.peak_weight_bytes, floatBytes(wd.size()));
}

void MoeEngine::mlpStep(int layer, const SequenceBatch& /*batch*/, Buffers& buf, ForwardObserver& observer,
                        ForwardStats& stats) const {
  const ModelConfig& c = config_;
  const int64_t n = buf.n, H = c.hidden;
  const std::string layer_prefix = fmt::format("model.layers.{}.", layer);
  {
    auto w = weights_->vector(layer_prefix + "post_attention_layernorm.weight", H);
    rmsNormRows(buf.x.data(), n, H, w.data(), c.norm_eps, buf.normed.data());
  }
  MatrixRM out = MatrixRM::Zero(n, H);
  if (!c.moe_layer[layer]) {
    denseMlp(layer_prefix + c.dense_module + ".", c.dense_intermediate, buf.normed.data(), n, out.data(),
             stats);
    addResidual(buf.x, out, c.residual_multiplier);
    return;
  }
  const std::string mp = layer_prefix + c.moe_module + ".";
  const int E = c.num_experts, k = c.top_k;

  // Router: logits in float32 (plus the router's bias where it has one), then the family's routing.
  MatrixRM logits(n, E);
  {
    const std::string router = mp + c.router_module + ".";
    MatrixRM w = weights_->matrix(router + "weight", E, H);
    std::vector<float> bias;
    if (c.router_bias) bias = weights_->vector(router + "bias", E);
    linear(buf.normed.data(), n, w, c.router_bias ? bias.data() : nullptr, logits.data());
  }
  std::vector<float> score_bias;
  if (c.scoring == RouterScoring::SigmoidBiasedTopK)
    score_bias = weights_->vector(mp + "gate.e_score_correction_bias", E);
  std::vector<int32_t> chosen(static_cast<std::size_t>(n) * k);
  std::vector<float> chosen_w(chosen.size());
  routeTokens(c, logits.data(), n, score_bias.empty() ? nullptr : score_bias.data(), chosen.data(),
              chosen_w.data());
  RoutingView view{layer, c.moeIndex(layer), n, k, E, chosen.data(), chosen_w.data()};
  observer.onRouting(view);

  // Per expert: gather its tokens, one GEMM per projection, scatter back (in expert order, as HF adds).
  // The routing weight multiplies the expert's output, or for Llama 4 its input (HF's Llama4TextMoe
  // scales the hidden states before the experts; with SwiGLU that is not the same).
  std::vector<std::vector<std::pair<int64_t, float>>> routed(E);
  for (int64_t t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) routed[chosen[t * k + j]].emplace_back(t, chosen_w[t * k + j]);
  const ExpertMlp experts(c, *weights_, mp);
  uint64_t expert_act_bytes = 0;
  MatrixRM down;
  for (int e = 0; e < E; ++e) {
    const auto& tokens = routed[e];
    if (tokens.empty()) continue;  // an expert no token chose is never read
    const int64_t m = static_cast<int64_t>(tokens.size());
    MatrixRM xe(m, H);
    for (int64_t r = 0; r < m; ++r) {
      xe.row(r) = buf.normed.row(tokens[r].first);
      if (c.weight_on_input) xe.row(r) *= tokens[r].second;
    }
    const ExpertMlp::Cost cost = experts.run(e, xe, down);
    for (int64_t r = 0; r < m; ++r) {
      if (c.weight_on_input)
        out.row(tokens[r].first) += down.row(r);
      else
        out.row(tokens[r].first) += tokens[r].second * down.row(r);
    }
    notePeak(stats.peak_weight_bytes, cost.weight_bytes);
    expert_act_bytes = std::max(expert_act_bytes, floatBytes(xe.size()) + cost.activation_bytes);
  }

  if (c.shared_intermediate > 0) {
    MatrixRM shared(n, H);
    denseMlp(mp + c.shared_module + ".", c.shared_intermediate, buf.normed.data(), n, shared.data(), stats);
    if (c.shared_expert_gate) {
      MatrixRM gw = weights_->matrix(mp + "shared_expert_gate.weight", 1, H);
      for (int64_t t = 0; t < n; ++t) {
        const float g = buf.normed.row(t).dot(gw.row(0));
        out.row(t) += (1.0f / (1.0f + std::exp(-g))) * shared.row(t);
      }
    } else {
      out += shared;
    }
  }
  addResidual(buf.x, out, c.residual_multiplier);
  notePeak(stats.peak_activation_bytes, buf.base_bytes() + floatBytes(out.size() + logits.size()) +
                                            expert_act_bytes + chosen.size() * 8 +
                                            static_cast<uint64_t>(n) * k * 16);
}

void MoeEngine::headStep(Buffers& buf, ForwardObserver& observer, ForwardStats& stats) const {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden;
  auto w_norm = weights_->vector("model.norm.weight", H);
  MatrixRM w = weights_->matrix(c.lm_head, c.vocab, H);
  notePeak(stats.peak_weight_bytes, floatBytes(w.size()));
  // Logits of `rows` normed rows starting at `x`, delivered as rows [row_begin, row_begin + rows).
  auto emit = [&](const float* x, int64_t rows, int64_t row_begin, MatrixRM& logits) {
    linear(x, rows, w, nullptr, logits.data());
    // Granite divides the logits (HF: logits / logits_scaling, a division, not a reciprocal product).
    if (c.logits_scaling != 1.0) logits.topRows(rows).array() /= static_cast<float>(c.logits_scaling);
    observer.onLogits(row_begin, rows, logits.data(), c.vocab);
  };

  if (observer.lastLogitsOnly()) {
    // Generation: the head runs on each sequence's last row only, and onLogits rows are sequence indices.
    // A sequence without tokens in this pass has no last row: it is left out, so one call covers each run
    // of consecutive sequences that have tokens (row_begin = the run's first sequence).
    const SequenceBatch& batch = *buf.batch;
    const int S = batch.sequences();
    MatrixRM last(S, H), logits(S, c.vocab);
    for (int s0 = 0; s0 < S;) {
      if (batch.length(s0) == 0) {
        ++s0;
        continue;
      }
      int s1 = s0;
      while (s1 < S && batch.length(s1) > 0) {
        rmsNormRows(buf.x.data() + (batch.offsets[s1 + 1] - 1) * H, 1, H, w_norm.data(), c.norm_eps,
                    last.data() + (s1 - s0) * H);
        ++s1;
      }
      emit(last.data(), s1 - s0, s0, logits);
      s0 = s1;
    }
    notePeak(stats.peak_activation_bytes, buf.base_bytes() + floatBytes(last.size() + logits.size()));
    return;
  }

  const int64_t n = buf.n;
  rmsNormRows(buf.x.data(), n, H, w_norm.data(), c.norm_eps, buf.normed.data());
  // Row blocks keep the logits buffer small however many tokens the batch has.
  const int64_t block = 512;
  MatrixRM logits(std::min(block, n), c.vocab);
  for (int64_t r0 = 0; r0 < n; r0 += block) {
    const int64_t rows = std::min(block, n - r0);
    emit(buf.normed.data() + r0 * H, rows, r0, logits);
  }
  notePeak(stats.peak_activation_bytes, buf.base_bytes() + floatBytes(logits.size()));
}

MatrixRM MoeEngine::logits(std::span<const int32_t> ids) const {
  struct Collect : ForwardObserver {
    MatrixRM out;
    void onLogits(int64_t row_begin, int64_t rows, const float* l, int64_t vocab) override {
      out.middleRows(row_begin, rows) = Eigen::Map<const MatrixRM>(l, rows, vocab);
    }
  } collect;
  collect.out.resize(static_cast<int64_t>(ids.size()), config_.vocab);
  SequenceBatch batch;
  batch.add(ids);
  forward(batch, collect);
  return collect.out;
}

}  // namespace moewb::engine

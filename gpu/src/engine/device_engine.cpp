// SPDX-License-Identifier: MIT
// The device engine's forward pass: the CPU engine's steps (core/src/engine/engine.cpp, experts.cpp) with
// weights, activations and the KV cache on the GPU.
#include "moewb/gpu/device_engine.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>

#include "device_decode_state.h"
#include "device_memory.h"
#include "device_weights.h"
#include "engine_kernels.h"
#include "moewb/engine/kernels.h"
#include "moewb/engine/kv_cache.h"
#include "moewb/engine/routing.h"
#include "moewb/error.h"
#include "moewb/gpu/device.h"
#include "moewb/gpu/w3a16.h"

namespace moewb::gpu {

using namespace device_engine;
namespace ek = engine_kernels;
using engine::ForwardObserver;
using engine::ForwardStats;
using engine::ModelConfig;
using engine::SequenceBatch;

namespace {

// Where one sequence of the batch sits and what it attends to.
struct SequenceSlot {
  int64_t offset = 0;  // first row in the batch
  int64_t tokens = 0;  // new tokens of this pass
  int64_t past = 0;    // cached tokens before them (generation)
};

// Score matrices of one attention launch stay under this size; bigger groups are split by sequence.
constexpr uint64_t kScoreBytes = 512ull << 20;
// Rows of logits computed at once.
constexpr int64_t kLogitBytes = 512ll << 20;

}  // namespace

struct DeviceEngine::Impl {
  DeviceEngineOptions options;
  std::string description;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  DeviceWeightStore store;
  std::mutex mutex;
  DeviceEngineStats stats;

  // Scratch, grown on demand and kept between passes.
  DeviceBuffer ids, positions, x, normed, q, k, v, attn, proj, mlp_out, router_logits, xs, gu, act, ys, shared,
      shared_gate, scores, xbf, ptrs, firsts, perm, slots, experts, pair_weights, pair_scale, head_rows, logits,
      targets, nll, rope_cos, rope_sin, row_index, expert_counts, expert_start, expert_fill, normed_bf16, mla_q, mla_ckv, mla_latent, mla_kvb;
  PinnedBuffer routing_host, counts_host;
  DeviceBuffer cublas_workspace, int3_workspace, int3_out;
  // The RoPE tables on the device: for which RoPE configuration, up to which position.
  engine::RopeConfig rope_config;
  int64_t rope_positions = 0;
  int rope_half = 0;
  bool rope_interleaved = false;

  Impl(const DeviceEngineOptions& o, bool bf16) : options(o), store(bf16, nullptr) {}
  ~Impl() {
    if (cublas) cublasDestroy(cublas);
    if (stream) cudaStreamDestroy(stream);
  }
  bool bf16() const { return options.precision == DeviceEngineOptions::Precision::Bf16; }

  uint64_t scratchBytes() const {
    uint64_t b = 0;
    for (const DeviceBuffer* d : {&ids, &positions, &x, &normed, &q, &k, &v, &attn, &proj, &mlp_out, &router_logits,
                                  &xs, &gu, &act, &ys, &shared, &shared_gate, &scores, &xbf, &ptrs, &firsts, &perm,
                                  &slots, &experts, &pair_weights, &pair_scale, &head_rows, &logits, &targets, &nll,
                                  &rope_cos, &rope_sin, &row_index, &expert_counts, &expert_start, &expert_fill, &normed_bf16, &mla_q, &mla_ckv, &mla_latent, &mla_kvb})
      b += d->bytes();
    return b;
  }

  template <typename T>
  void upload(DeviceBuffer& b, const T* host, int64_t count) {
    T* d = scratch<T>(b, std::max<int64_t>(count, 1));
    if (count > 0)
      cudaCheck(cudaMemcpyAsync(d, host, count * sizeof(T), cudaMemcpyHostToDevice, stream), "uploading indices");
  }
  template <typename T>
  void download(const T* device, int64_t count, T* host) {
    cudaCheck(cudaMemcpyAsync(host, device, count * sizeof(T), cudaMemcpyDeviceToHost, stream), "downloading");
    cudaCheck(cudaStreamSynchronize(stream), "downloading");
  }

  // y[m, n] (row stride ldy) = x[m, k] * W3A16(w)^T (+ its compensator), in blocks of 64 rows (the kernel's
  // largest batch tile): decode steps are one call; longer passes read the 3-bit weights once per block.
  void gemmInt3(const float* x, int64_t m, const DeviceMatrix& w, float* y, int64_t ldy,
                const __nv_bfloat16* x_bf16) {
    if (m == 0) return;
    if (!x_bf16) {
      auto* xb = scratch<__nv_bfloat16>(xbf, m * w.cols);
      ek::toBf16(x, m * w.cols, xb, stream);
      x_bf16 = xb;
    }
    const auto ws_bytes = static_cast<std::size_t>(w3a16WorkspaceBytes(w.rows));
    if (ws_bytes > int3_workspace.bytes()) {
      int3_workspace.grow(ws_bytes);
      cudaCheck(cudaMemsetAsync(int3_workspace.as(), 0, int3_workspace.bytes(), stream), "W3A16 scratch");
    }
    auto* yb = scratch<__nv_bfloat16>(int3_out, std::min<int64_t>(m, 64) * w.rows);
    for (int64_t r = 0; r < m; r += 64) {
      const int64_t rows = std::min<int64_t>(64, m - r);
      const Status st = w3a16Gemm(x_bf16 + r * w.cols, *w.int3, yb, rows, w.compensator, int3_workspace.as(),
                                  int64_t(int3_workspace.bytes()), stream);
      if (!st.ok()) throw Error("cuda engine: the W3A16 GEMM failed: " + st.message);
      ek::fromBf16Strided(yb, rows, w.rows, y + r * ldy, ldy, stream);
    }
  }

  // y[n, out] = x[n, in] * w^T (+ bias). x_bf16: x already converted (bf16 mode), else converted here.
  void gemm(const float* x, int64_t n, const DeviceMatrix& w, float* y, const __nv_bfloat16* x_bf16 = nullptr) {
    if (n == 0) return;
    if (w.int3) return gemmInt3(x, n, w, y, w.rows, x_bf16);
    const float one = 1.0f, zero = 0.0f;
    const int m = static_cast<int>(w.rows), kk = static_cast<int>(w.cols), nn = static_cast<int>(n);
    if (w.bf16) {
      if (!x_bf16) {
        auto* xb = scratch<__nv_bfloat16>(xbf, n * w.cols);
        ek::toBf16(x, n * w.cols, xb, stream);
        x_bf16 = xb;
      }
      cublasCheck(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, m, nn, kk, &one, w.data, CUDA_R_16BF, kk, x_bf16,
                               CUDA_R_16BF, kk, &zero, y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "a bf16 weight GEMM");
    } else {
      cublasCheck(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, m, nn, kk, &one, w.data, CUDA_R_32F, kk, x,
                               CUDA_R_32F, kk, &zero, y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F_PEDANTIC,
                               CUBLAS_GEMM_DEFAULT),
                  "a float32 weight GEMM");
    }
    if (w.bias) ek::addBias(y, n, w.rows, w.bias, stream);
  }

  struct Pass;
  // The W3A16 forms of a gate and an up projection when both have one (then they run as two GEMMs
  // writing the halves of [gate | up]); otherwise nullopt and the pair is stacked into one dense matrix.
  std::optional<std::pair<const DeviceMatrix*, const DeviceMatrix*>> int3Pair(Pass& p, const std::string& gate,
                                                                             const std::string& up, int64_t rows,
                                                                             int64_t cols);
  void tapInput(Pass& p, const std::string& name, const float* x, int64_t n, int64_t cols);
  void linear(Pass& p, const std::string& name, const float* x, int64_t n, const DeviceMatrix& w, float* y) {
    tapInput(p, name, x, n, w.cols);
    gemm(x, n, w, y);
  }
  void attention(Pass& p, int layer);
  void mlaProjections(Pass& p, int layer, const float* N, const __nv_bfloat16* NB, float* Q, float* K, float* V);
  void denseMlp(Pass& p, const std::string& prefix, int64_t inter, const float* x, int64_t n, float* out,
                DeviceBuffer& gu_buf, DeviceBuffer& act_buf);
  void moe(Pass& p, int layer);
  void head(Pass& p);
  void uploadRope(Pass& p, int64_t max_position);
  ForwardStats run(Pass& p);
};

// One forward pass: what it runs over and what it fills in on the way.
struct DeviceEngine::Impl::Pass {
  Pass(const engine::MoeEngine& engine, const SequenceBatch& batch, ForwardObserver& observer,
       DeviceDecodeState* state = nullptr, ProgressReporter* progress = nullptr, double progress_begin = 0,
       double progress_span = 1, engine::LinearInputTap* tap = nullptr, bool load_all_experts = false)
      : engine(engine),
        c(engine.config()),
        w(engine.weights()),
        batch(batch),
        observer(observer),
        state(state),
        progress(progress),
        progress_begin(progress_begin),
        progress_span(progress_span),
        tap(tap),
        load_all_experts(load_all_experts) {}
  const engine::MoeEngine& engine;
  const ModelConfig& c;
  const engine::WeightProvider& w;
  const SequenceBatch& batch;
  ForwardObserver& observer;
  DeviceDecodeState* state;
  ProgressReporter* progress;
  double progress_begin, progress_span;
  engine::LinearInputTap* tap;
  bool load_all_experts = false;  // prepare(): upload every expert, not only the routed ones
  int64_t n = 0;
  std::vector<SequenceSlot> slots;
  int rope_half = 0;
  bool rope_interleaved = false;
  ForwardStats stats;
};

std::optional<std::pair<const DeviceMatrix*, const DeviceMatrix*>> DeviceEngine::Impl::int3Pair(
    Pass& p, const std::string& gate, const std::string& up, int64_t rows, int64_t cols) {
  if (!bf16() || !p.w.storedForm(gate) || !p.w.storedForm(up)) return std::nullopt;
  const DeviceMatrix& g = store.matrix(p.w, gate, rows, cols);
  const DeviceMatrix& u = store.matrix(p.w, up, rows, cols);
  if (!g.int3 || !u.int3) return std::nullopt;
  return std::make_pair(&g, &u);
}

void DeviceEngine::Impl::tapInput(Pass& p, const std::string& name, const float* x, int64_t n, int64_t cols) {
  if (!p.tap || name.empty() || n == 0) return;
  std::vector<float> host(static_cast<std::size_t>(n * cols));
  download(x, n * cols, host.data());
  p.tap->onLinearInput(name, host.data(), n, cols);
}

namespace {

bool sameRope(const engine::RopeConfig& a, const engine::RopeConfig& b) {
  return a.type == b.type && a.theta == b.theta && a.factor == b.factor && a.rotary_dim == b.rotary_dim &&
         a.interleaved == b.interleaved && a.original_max_positions == b.original_max_positions &&
         a.low_freq_factor == b.low_freq_factor && a.high_freq_factor == b.high_freq_factor &&
         a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow && a.mscale == b.mscale &&
         a.mscale_all_dim == b.mscale_all_dim && a.attention_factor == b.attention_factor &&
         a.truncate == b.truncate;
}

}  // namespace

void DeviceEngine::Impl::uploadRope(Pass& p, int64_t max_position) {
  // Rows are positions, so tables made for more positions serve a shorter pass too (and a decode step
  // computes nothing) — except dynamic NTK scaling, whose frequencies depend on the length itself.
  const bool by_length = p.c.rope.type == "dynamic";
  const bool current = rope_positions > 0 && sameRope(rope_config, p.c.rope) &&
                       (by_length ? rope_positions == max_position : rope_positions >= max_position);
  if (!current) {
    const engine::RopeTables t = engine::makeRopeTables(p.c.rope, max_position);
    upload(rope_cos, t.cos.data(), static_cast<int64_t>(t.cos.size()));
    upload(rope_sin, t.sin.data(), static_cast<int64_t>(t.sin.size()));
    rope_config = p.c.rope;
    rope_positions = max_position;
    rope_half = t.half;
    rope_interleaved = t.interleaved;
  }
  p.rope_half = rope_half;
  p.rope_interleaved = rope_interleaved;
}

void DeviceEngine::Impl::attention(Pass& p, int layer) {
  const ModelConfig& c = p.c;
  const int64_t n = p.n, H = c.hidden;
  const std::string pre = fmt::format("model.layers.{}.self_attn.", layer);
  const int heads = c.heads, kvh = c.kv_heads;
  const int dq = c.mla ? c.qk_nope_dim + c.qk_rope_dim : c.head_dim;  // query/key head size
  const int dv = c.mla ? c.v_head_dim : c.head_dim;
  const int64_t qs = int64_t(heads) * dq, ks = int64_t(kvh) * dq, vs = int64_t(kvh) * dv, os = int64_t(heads) * dv;
  float* X = x.as<float>();
  float* N = normed.as<float>();
  ek::rmsNormRows(X, n, H, H, store.vector(p.w, fmt::format("model.layers.{}.input_layernorm.weight", layer), H),
                  float(c.norm_eps), N, H, stream);
  float* Q = scratch<float>(q, n * qs);
  float* K = scratch<float>(k, n * ks);
  float* V = scratch<float>(v, n * vs);
  // bf16 mode: the normed input converted once for q, k and v.
  const __nv_bfloat16* NB = nullptr;
  if (bf16()) {
    auto* b = scratch<__nv_bfloat16>(normed_bf16, n * H);
    ek::toBf16(N, n * H, b, stream);
    NB = b;
  }
  auto project = [&](const char* name, int64_t rows, const float* in, float* out, bool bias) {
    const std::string m = pre + name + ".weight";
    const DeviceMatrix& w =
        store.matrix(p.w, m, rows, in == N ? H : os, bias ? pre + name + ".bias" : std::string{});
    tapInput(p, m, in, n, w.cols);
    gemm(in, n, w, out, in == N ? NB : nullptr);
  };
  const int64_t* pos = positions.as<int64_t>();
  const bool rope = c.layer_attention[layer].rope;
  if (c.mla) {
    mlaProjections(p, layer, N, NB, Q, K, V);
  } else {
    // One bf16 conversion of the normed input for q, k and v.
    project("q_proj", qs, N, Q, c.qkv_bias);
    project("k_proj", ks, N, K, c.qkv_bias);
    project("v_proj", vs, N, V, c.qkv_bias);
    using QkNorm = ModelConfig::QkNorm;
    if (c.qk_norm == QkNorm::PerHead) {
      ek::rmsNormRows(Q, n * heads, dq, dq, store.vector(p.w, pre + "q_norm.weight", dq), float(c.norm_eps), Q, dq,
                      stream);
      ek::rmsNormRows(K, n * kvh, dq, dq, store.vector(p.w, pre + "k_norm.weight", dq), float(c.norm_eps), K, dq,
                      stream);
    } else if (c.qk_norm == QkNorm::WholeProjection) {
      ek::rmsNormRows(Q, n, qs, qs, store.vector(p.w, pre + "q_norm.weight", qs), float(c.norm_eps), Q, qs, stream);
      ek::rmsNormRows(K, n, ks, ks, store.vector(p.w, pre + "k_norm.weight", ks), float(c.norm_eps), K, ks, stream);
    }
    if (c.clip_qkv) {
      ek::clampValues(Q, n * qs, float(*c.clip_qkv), stream);
      ek::clampValues(K, n * ks, float(*c.clip_qkv), stream);
      ek::clampValues(V, n * vs, float(*c.clip_qkv), stream);
    }
    if (rope) {
      ek::applyRope(Q, n, heads, dq, qs, pos, rope_cos.as<float>(), rope_sin.as<float>(), p.rope_half,
                    p.rope_interleaved, stream);
      ek::applyRope(K, n, kvh, dq, ks, pos, rope_cos.as<float>(), rope_sin.as<float>(), p.rope_half,
                    p.rope_interleaved, stream);
    }
    if (c.qk_norm == QkNorm::L2AfterRope && rope) {
      ek::rmsNormRows(Q, n * heads, dq, dq, nullptr, float(c.norm_eps), Q, dq, stream);
      ek::rmsNormRows(K, n * kvh, dq, dq, nullptr, float(c.norm_eps), K, dq, stream);
    }
    if (c.temperature_tuning && !rope)
      ek::temperatureTuning(Q, n, qs, pos, float(c.floor_scale), float(c.attn_scale), stream);
  }

  // Host hooks: the KV-cache format and K/V observers see the same float32 rows as on the CPU.
  const auto& policy = p.engine.kvCachePolicy();
  if (policy || p.observer.wantsKeysValues()) {
    std::vector<float> hk(static_cast<std::size_t>(n * ks)), hv(static_cast<std::size_t>(n * vs));
    download(K, n * ks, hk.data());
    download(V, n * vs, hv.data());
    if (policy) {
      const auto stored = engine::applyKvCachePolicy(*policy, layer, p.batch, engine::KvShape{kvh, dq, dv},
                                                     hk.data(), ks, hv.data(), vs);
      p.stats.kv_stored_bits += stored.bits;
      p.stats.kv_elements += stored.elements;
      upload(k, hk.data(), n * ks);
      upload(v, hv.data(), n * vs);
    }
    if (p.observer.wantsKeysValues()) {
      for (int s = 0; s < p.batch.sequences(); ++s) {
        engine::KeyValueView view;
        view.layer = layer;
        view.sequence = s;
        view.length = p.batch.length(s);
        view.kv_heads = kvh;
        view.key_dim = dq;
        view.value_dim = dv;
        view.keys = hk.data() + p.batch.offsets[s] * ks;
        view.values = hv.data() + p.batch.offsets[s] * vs;
        view.key_row_stride = ks;
        view.value_row_stride = vs;
        p.observer.onKeysValues(view);
      }
    }
  }

  // Keys and values each sequence attends to: the batch's rows, or the cache with the new rows appended.
  std::vector<const float*> key_base(p.slots.size()), value_base(p.slots.size());
  for (std::size_t s = 0; s < p.slots.size(); ++s) {
    const SequenceSlot& sl = p.slots[s];
    if (p.state) {
      float* kc = p.state->keys[layer][s].as<float>();
      float* vc = p.state->values[layer][s].as<float>();
      if (sl.tokens > 0) {
        cudaCheck(cudaMemcpyAsync(kc + sl.past * ks, K + sl.offset * ks, sl.tokens * ks * sizeof(float),
                                  cudaMemcpyDeviceToDevice, stream),
                  "appending to the KV cache");
        cudaCheck(cudaMemcpyAsync(vc + sl.past * vs, V + sl.offset * vs, sl.tokens * vs * sizeof(float),
                                  cudaMemcpyDeviceToDevice, stream),
                  "appending to the KV cache");
      }
      key_base[s] = kc;
      value_base[s] = vc;
    } else {
      key_base[s] = K + sl.offset * ks;
      value_base[s] = V + sl.offset * vs;
    }
  }

  // Sequences of equal (new, total) lengths share batched GEMMs: scores = Q K^T, softmax, P V.
  float* out = scratch<float>(attn, n * os);
  const float* sinks = c.attention_sinks ? store.vector(p.w, pre + "sinks", heads) : nullptr;
  const engine::LayerAttention& mask = c.layer_attention[layer];
  const int group = heads / kvh;
  std::map<std::pair<int64_t, int64_t>, std::vector<int>> groups;
  for (std::size_t s = 0; s < p.slots.size(); ++s)
    if (p.slots[s].tokens > 0)
      groups[{p.slots[s].tokens, p.slots[s].past + p.slots[s].tokens}].push_back(static_cast<int>(s));
  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F_PEDANTIC;
  const bool want_probs = p.observer.wantsAttention();
  for (const auto& [shape, members] : groups) {
    const int64_t T = shape.first, L = shape.second;
    const int64_t per_sequence = std::max<int64_t>(1, int64_t(kScoreBytes / (uint64_t(heads) * T * L * 4)));
    for (std::size_t g0 = 0; g0 < members.size(); g0 += per_sequence) {
      const std::size_t g1 = std::min(members.size(), g0 + std::size_t(per_sequence));
      const int count = static_cast<int>((g1 - g0) * heads);
      float* S = scratch<float>(scores, int64_t(count) * T * L);
      std::vector<const void*> ptr(6 * std::size_t(count));
      std::vector<int64_t> first(g1 - g0);
      for (std::size_t i = g0; i < g1; ++i) {
        const int s = members[i];
        first[i - g0] = p.slots[s].past;
        for (int h = 0; h < heads; ++h) {
          const std::size_t b = (i - g0) * heads + h;
          const int kv = h / group;
          ptr[b] = key_base[s] + int64_t(kv) * dq;
          ptr[count + b] = Q + p.slots[s].offset * qs + int64_t(h) * dq;
          ptr[2 * count + b] = S + int64_t(b) * T * L;
          ptr[3 * count + b] = value_base[s] + int64_t(kv) * dv;
          ptr[4 * count + b] = S + int64_t(b) * T * L;
          ptr[5 * count + b] = out + p.slots[s].offset * os + int64_t(h) * dv;
        }
      }
      upload(ptrs, ptr.data(), int64_t(ptr.size()));
      upload(firsts, first.data(), int64_t(first.size()));
      void** P = ptrs.as<void*>();
      const float one = 1.0f, zero = 0.0f;
      cublasCheck(cublasGemmBatchedEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(L), int(T), dq, &one, const_cast<const void**>(P), CUDA_R_32F,
                                      int(ks), const_cast<const void**>(P + count), CUDA_R_32F, int(qs), &zero,
                                      P + 2 * count, CUDA_R_32F, int(L), count,
                                      compute, CUBLAS_GEMM_DEFAULT),
                  "attention scores");
      ek::maskedSoftmax(S, count, T, L, heads, firsts.as<int64_t>(), float(c.attention_scale), mask.sliding_window,
                        mask.chunk, sinks, stream);
      if (want_probs && !p.state) {
        std::vector<float> probs(static_cast<std::size_t>(int64_t(count) * T * L));
        download(S, int64_t(probs.size()), probs.data());
        for (std::size_t i = g0; i < g1; ++i)
          for (int h = 0; h < heads; ++h)
            p.observer.onAttention(layer, members[i], h, probs.data() + ((i - g0) * heads + h) * T * L, T);
      }
      cublasCheck(cublasGemmBatchedEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, dv, int(T), int(L), &one, const_cast<const void**>(P + 3 * count),
                                      CUDA_R_32F, int(vs), const_cast<const void**>(P + 4 * count), CUDA_R_32F, int(L), &zero,
                                      P + 5 * count, CUDA_R_32F, int(os), count,
                                      compute, CUBLAS_GEMM_DEFAULT),
                  "attention output");
    }
  }
  float* projected = scratch<float>(proj, n * H);
  project("o_proj", H, out, projected, c.o_bias);
  ek::addScaled(X, projected, n * H, float(c.residual_multiplier), stream);
}

// Multi-head latent attention (DeepSeek-V2/V3) as the CPU engine computes it: queries through an optional
// low-rank bottleneck, a compressed KV latent expanded per head, and a RoPE key part shared by all heads.
void DeviceEngine::Impl::mlaProjections(Pass& p, int layer, const float* N, const __nv_bfloat16* NB, float* Q,
                                        float* K, float* V) {
  const ModelConfig& c = p.c;
  constexpr float kLatentNormEps = 1e-6f;  // HF's MLA norms keep their default eps
  const int64_t n = p.n, H = c.hidden;
  const std::string pre = fmt::format("model.layers.{}.self_attn.", layer);
  const int heads = c.heads, nope = c.qk_nope_dim, rope = c.qk_rope_dim, lora = c.kv_lora_rank, dv = c.v_head_dim;
  const int dq = nope + rope;
  const int64_t qs = int64_t(heads) * dq;
  auto biasOf = [&](const std::string& name) {
    return p.w.contains(pre + name + ".bias") ? pre + name + ".bias" : std::string{};
  };
  if (c.q_lora_rank > 0) {
    float* qa = scratch<float>(mla_q, n * c.q_lora_rank);
    const DeviceMatrix& wa = store.matrix(p.w, pre + "q_a_proj.weight", c.q_lora_rank, H, biasOf("q_a_proj"));
    tapInput(p, pre + "q_a_proj.weight", N, n, H);
    gemm(N, n, wa, qa, NB);
    ek::rmsNormRows(qa, n, c.q_lora_rank, c.q_lora_rank, store.vector(p.w, pre + "q_a_layernorm.weight", c.q_lora_rank),
                    kLatentNormEps, qa, c.q_lora_rank, stream);
    linear(p, pre + "q_b_proj.weight", qa, n, store.matrix(p.w, pre + "q_b_proj.weight", qs, c.q_lora_rank), Q);
  } else {
    tapInput(p, pre + "q_proj.weight", N, n, H);
    gemm(N, n, store.matrix(p.w, pre + "q_proj.weight", qs, H), Q, NB);
  }
  const int64_t ckv_width = lora + rope;
  float* ckv = scratch<float>(mla_ckv, n * ckv_width);
  tapInput(p, pre + "kv_a_proj_with_mqa.weight", N, n, H);
  gemm(N, n, store.matrix(p.w, pre + "kv_a_proj_with_mqa.weight", ckv_width, H, biasOf("kv_a_proj_with_mqa")), ckv,
       NB);
  float* latent = scratch<float>(mla_latent, n * lora);
  ek::rmsNormRows(ckv, n, lora, ckv_width, store.vector(p.w, pre + "kv_a_layernorm.weight", lora), kLatentNormEps,
                  latent, lora, stream);
  const int64_t per_head = nope + dv;
  float* kvb = scratch<float>(mla_kvb, n * heads * per_head);
  linear(p, pre + "kv_b_proj.weight", latent, n, store.matrix(p.w, pre + "kv_b_proj.weight", heads * per_head, lora),
         kvb);
  const int64_t* pos = positions.as<int64_t>();
  ek::applyRope(ckv + lora, n, 1, rope, ckv_width, pos, rope_cos.as<float>(), rope_sin.as<float>(), p.rope_half,
                p.rope_interleaved, stream);
  ek::applyRope(Q + nope, n, heads, dq, qs, pos, rope_cos.as<float>(), rope_sin.as<float>(), p.rope_half,
                p.rope_interleaved, stream);
  ek::assembleMla(kvb, ckv, n, heads, nope, rope, dv, lora, K, V, stream);
}

void DeviceEngine::Impl::denseMlp(Pass& p, const std::string& prefix, int64_t inter, const float* in, int64_t n,
                                  float* out, DeviceBuffer& gu_buf, DeviceBuffer& act_buf) {
  const int64_t H = p.c.hidden;
  const std::string g = prefix + "gate_proj.weight", u = prefix + "up_proj.weight", d = prefix + "down_proj.weight";
  tapInput(p, g, in, n, H);
  tapInput(p, u, in, n, H);
  float* GU = scratch<float>(gu_buf, n * 2 * inter);
  if (auto pair = int3Pair(p, g, u, inter, H)) {
    gemmInt3(in, n, *pair->first, GU, 2 * inter, nullptr);
    gemmInt3(in, n, *pair->second, GU + inter, 2 * inter, nullptr);
  } else {
    gemm(in, n, store.stacked(p.w, prefix + "[gate;up]", {g, u}, inter, H), GU);
  }
  float* A = scratch<float>(act_buf, n * inter);
  ek::swiGlu(GU, n, inter, A, stream);
  linear(p, d, A, n, store.matrix(p.w, d, H, inter), out);
}

void DeviceEngine::Impl::moe(Pass& p, int layer) {
  const ModelConfig& c = p.c;
  const int64_t n = p.n, H = c.hidden, I = c.moe_intermediate;
  float* X = x.as<float>();
  float* N = normed.as<float>();
  const std::string lp = fmt::format("model.layers.{}.", layer);
  ek::rmsNormRows(X, n, H, H, store.vector(p.w, lp + "post_attention_layernorm.weight", H), float(c.norm_eps), N, H,
                  stream);
  float* out = scratch<float>(mlp_out, n * H);
  if (!c.moe_layer[layer]) {
    denseMlp(p, lp + c.dense_module + ".", c.dense_intermediate, N, n, out, gu, act);
    ek::addScaled(X, out, n * H, float(c.residual_multiplier), stream);
    return;
  }
  const std::string mp = lp + c.moe_module + ".";
  const int E = c.num_experts, kk = c.top_k;

  // Router logits on the device; the routers that look at one token's logits run there too, the others
  // (DeepSeek's grouped and bias-corrected choices) on the host with the CPU engine's code.
  {
    const std::string router = mp + c.router_module + ".";
    const DeviceMatrix& rw =
        store.matrix(p.w, router + "weight", E, H, c.router_bias ? router + "bias" : std::string{});
    gemm(N, n, rw, scratch<float>(router_logits, n * E));
  }
  const int64_t pairs = n * kk;
  // bf16 GEMMs run on expert row counts padded to a few shapes (engine_kernels.h: paddedRows); the
  // float32 mode's GEMMs gain nothing from it.
  const int pad = bf16() ? (pairs <= 64 * E ? 16 : 128) : 1;
  const int64_t rows_max = pairs + int64_t(E) * (pad - 1);
  int32_t* chosen_d = scratch<int32_t>(experts, pairs);
  float* weights_d = scratch<float>(pair_weights, pairs);
  int32_t* perm_d = scratch<int32_t>(perm, rows_max);
  int32_t* slot_d = scratch<int32_t>(slots, pairs);
  float* scale_d = scratch<float>(pair_scale, rows_max);
  cudaCheck(cudaMemsetAsync(perm_d, 0, rows_max * sizeof(int32_t), stream), "routing");
  cudaCheck(cudaMemsetAsync(scale_d, 0, rows_max * sizeof(float), stream), "routing");
  // count[e + 1]: tokens of expert e; start[e]: its first (padded) row; rows: all padded rows.
  std::vector<int64_t> count(E + 1, 0), start(E + 1, 0);
  const bool grouped = c.n_group > 1 && c.topk_group < c.n_group;
  if (c.scoring != engine::RouterScoring::SigmoidBiasedTopK && !grouped && !c.mla) {
    const auto router = c.scoring == engine::RouterScoring::SoftmaxTopK   ? ek::DeviceRouter::SoftmaxTopK
                        : c.scoring == engine::RouterScoring::TopKSigmoid ? ek::DeviceRouter::TopKSigmoid
                                                                          : ek::DeviceRouter::TopKSoftmax;
    int32_t* counts_d = scratch<int32_t>(expert_counts, E);
    int32_t* start_d = scratch<int32_t>(expert_start, E + 1);
    cudaCheck(cudaMemsetAsync(counts_d, 0, E * sizeof(int32_t), stream), "routing");
    ek::routeTopK(router_logits.as<float>(), n, E, kk, router, c.norm_topk_prob, chosen_d, weights_d, counts_d,
                  stream);
    ek::sortPairsByExpert(chosen_d, weights_d, n, E, kk, counts_d, pad, start_d, scratch<int32_t>(expert_fill, E),
                          perm_d, slot_d, scale_d, stream);
    int32_t* starts_h = counts_host.get<int32_t>(E + 1);
    int32_t* chosen_h = routing_host.get<int32_t>(2 * pairs);
    float* weights_h = reinterpret_cast<float*>(chosen_h + pairs);
    cudaCheck(cudaMemcpyAsync(starts_h, start_d, (E + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream),
              "routing");
    cudaCheck(cudaMemcpyAsync(chosen_h, chosen_d, pairs * sizeof(int32_t), cudaMemcpyDeviceToHost, stream), "routing");
    cudaCheck(cudaMemcpyAsync(weights_h, weights_d, pairs * sizeof(float), cudaMemcpyDeviceToHost, stream),
              "routing");
    cudaCheck(cudaStreamSynchronize(stream), "routing");
    for (int e = 0; e <= E; ++e) start[e] = starts_h[e];
    for (int32_t e : std::span<const int32_t>(chosen_h, pairs)) ++count[e + 1];
    p.observer.onRouting({layer, c.moeIndex(layer), n, kk, E, chosen_h, weights_h});
  } else {
    std::vector<float> logits(static_cast<std::size_t>(n * E));
    download(router_logits.as<float>(), n * E, logits.data());
    std::vector<float> score_bias;
    if (c.scoring == engine::RouterScoring::SigmoidBiasedTopK)
      score_bias = p.w.vector(mp + "gate.e_score_correction_bias", E);
    std::vector<int32_t> chosen(static_cast<std::size_t>(pairs));
    std::vector<float> chosen_w(chosen.size());
    engine::routeTokens(c, logits.data(), n, score_bias.empty() ? nullptr : score_bias.data(), chosen.data(),
                        chosen_w.data());
    p.observer.onRouting({layer, c.moeIndex(layer), n, kk, E, chosen.data(), chosen_w.data()});
    // Token-expert pairs sorted by expert, tokens in order within an expert.
    for (int32_t e : chosen) ++count[e + 1];
    for (int e = 0; e < E; ++e) start[e + 1] = start[e] + ek::paddedRows(count[e + 1], pad);
    std::vector<int32_t> pair_token(rows_max, 0), slot(pairs);
    std::vector<float> scale_sorted(rows_max, 0.0f);
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t t = 0; t < n; ++t)
      for (int j = 0; j < kk; ++j) {
        const int e = chosen[t * kk + j];
        const int64_t r = fill[e]++;
        pair_token[r] = static_cast<int32_t>(t);
        slot[t * kk + j] = static_cast<int32_t>(r);
        scale_sorted[r] = chosen_w[t * kk + j];
      }
    upload(perm, pair_token.data(), rows_max);
    upload(slots, slot.data(), pairs);
    upload(experts, chosen.data(), pairs);
    upload(pair_weights, chosen_w.data(), pairs);
    upload(pair_scale, scale_sorted.data(), rows_max);
  }
  const int64_t rows = start[E];
  float* XS = scratch<float>(xs, rows * H);
  ek::gatherRows(N, H, perm.as<int32_t>(), c.weight_on_input ? pair_scale.as<float>() : nullptr, rows, XS,
                 stream);
  const __nv_bfloat16* XSB = nullptr;
  if (bf16()) {
    auto* b = scratch<__nv_bfloat16>(xbf, rows * H);
    ek::toBf16(XS, rows * H, b, stream);
    XSB = b;
  }
  float* GU = scratch<float>(gu, rows * 2 * I);
  float* A = scratch<float>(act, rows * I);
  float* Y = scratch<float>(ys, rows * H);

  // The expert's [gate; up] as one matrix (gpt-oss's interleaved rows and biases reordered on upload).
  std::vector<float> gate_up_bias, down_bias;
  if (c.expert_bias) {
    gate_up_bias = p.w.vector(mp + c.fused_gate_up + "_bias", int64_t(E) * 2 * I);
    down_bias = p.w.vector(mp + c.fused_down + "_bias", int64_t(E) * H);
  }
  auto gateUp = [&](int e) -> const DeviceMatrix& {
    if (!c.fused_experts) {
      const std::string ep = fmt::format("{}experts.{}.", mp, e);
      return store.stacked(p.w, ep + "[gate;up]", {ep + c.expert_gate + ".weight", ep + c.expert_up + ".weight"}, I,
                           H);
    }
    const std::string slice = fmt::format("{}{}[{}]", mp, c.fused_gate_up, e);
    return store.prepared(slice + "[gate;up]", [&](MatrixRM& m, std::vector<float>& bias) {
      const MatrixRM raw = p.w.matrix(slice, 2 * I, H);
      m.resize(2 * I, H);
      if (!gate_up_bias.empty()) bias.assign(gate_up_bias.begin() + int64_t(e) * 2 * I,
                                             gate_up_bias.begin() + int64_t(e + 1) * 2 * I);
      if (!c.gate_up_interleaved) {
        m = raw;
        return;
      }
      std::vector<float> reordered(bias.size());
      for (int64_t i = 0; i < I; ++i) {
        m.row(i) = raw.row(2 * i);
        m.row(I + i) = raw.row(2 * i + 1);
        if (!bias.empty()) reordered[i] = bias[2 * i], reordered[I + i] = bias[2 * i + 1];
      }
      if (!bias.empty()) bias = reordered;
    });
  };
  auto down = [&](int e) -> const DeviceMatrix& {
    if (!c.fused_experts) {
      const std::string name = fmt::format("{}experts.{}.{}.weight", mp, e, c.expert_down);
      return store.matrix(p.w, name, H, I);
    }
    const std::string slice = fmt::format("{}{}[{}]", mp, c.fused_down, e);
    return store.prepared(slice, [&](MatrixRM& m, std::vector<float>& bias) {
      m = p.w.matrix(slice, H, I);
      if (!down_bias.empty()) bias.assign(down_bias.begin() + int64_t(e) * H, down_bias.begin() + int64_t(e + 1) * H);
    });
  };
  auto tapNames = [&](int e) -> std::vector<std::string> {
    if (!c.fused_experts) {
      const std::string ep = fmt::format("{}experts.{}.", mp, e);
      return {ep + c.expert_gate + ".weight", ep + c.expert_up + ".weight", ep + c.expert_down + ".weight"};
    }
    return {fmt::format("{}{}[{}]", mp, c.fused_gate_up, e), fmt::format("{}{}[{}]", mp, c.fused_down, e)};
  };
  if (p.load_all_experts)
    for (int e = 0; e < E; ++e) {
      const std::string ep = fmt::format("{}experts.{}.", mp, e);
      if (c.fused_experts || !int3Pair(p, ep + c.expert_gate + ".weight", ep + c.expert_up + ".weight", I, H))
        gateUp(e);
      down(e);
    }
  for (int e = 0; e < E; ++e) {
    const int64_t m = count[e + 1];
    if (m == 0) continue;  // an expert no token chose is never read
    const int64_t r0 = start[e];
    if (p.tap) {
      auto names = tapNames(e);
      for (std::size_t i = 0; i + 1 < names.size(); ++i) tapInput(p, names[i], XS + r0 * H, m, H);
    }
    if (!c.fused_experts) {
      const std::string ep = fmt::format("{}experts.{}.", mp, e);
      if (auto pair = int3Pair(p, ep + c.expert_gate + ".weight", ep + c.expert_up + ".weight", I, H)) {
        gemmInt3(XS + r0 * H, m, *pair->first, GU + r0 * 2 * I, 2 * I, XSB ? XSB + r0 * H : nullptr);
        gemmInt3(XS + r0 * H, m, *pair->second, GU + r0 * 2 * I + I, 2 * I, XSB ? XSB + r0 * H : nullptr);
        continue;
      }
    }
    gemm(XS + r0 * H, ek::paddedRows(m, pad), gateUp(e), GU + r0 * 2 * I, XSB ? XSB + r0 * H : nullptr);
  }
  if (c.activation == engine::ExpertActivation::ClampedSwiGLU)
    ek::clampedSwiGlu(GU, rows, I, float(c.glu_alpha), float(c.glu_limit), A, stream);
  else
    ek::swiGlu(GU, rows, I, A, stream);
  const __nv_bfloat16* AB = nullptr;
  if (bf16()) {
    auto* b = scratch<__nv_bfloat16>(xbf, rows * I);
    ek::toBf16(A, rows * I, b, stream);
    AB = b;
  }
  for (int e = 0; e < E; ++e) {
    const int64_t m = count[e + 1];
    if (m == 0) continue;
    const int64_t r0 = start[e];
    if (p.tap) tapInput(p, tapNames(e).back(), A + r0 * I, m, I);
    gemm(A + r0 * I, ek::paddedRows(m, pad), down(e), Y + r0 * H, AB ? AB + r0 * I : nullptr);
  }
  ek::combineExperts(Y, H, slots.as<int32_t>(), experts.as<int32_t>(),
                     c.weight_on_input ? nullptr : pair_weights.as<float>(), n, kk, out, stream);

  if (c.shared_intermediate > 0) {
    float* SH = scratch<float>(shared, n * H);
    denseMlp(p, mp + c.shared_module + ".", c.shared_intermediate, N, n, SH, gu, act);
    const float* gate = nullptr;
    if (c.shared_expert_gate) {
      float* G = scratch<float>(shared_gate, n);
      gemm(N, n, store.matrix(p.w, mp + "shared_expert_gate.weight", 1, H), G);
      gate = G;
    }
    ek::addShared(out, SH, gate, n, H, stream);
  }
  ek::addScaled(X, out, n * H, float(c.residual_multiplier), stream);
}

void DeviceEngine::Impl::head(Pass& p) {
  const ModelConfig& c = p.c;
  const int64_t H = c.hidden, V = c.vocab;
  float* N = normed.as<float>();
  ek::rmsNormRows(x.as<float>(), p.n, H, H, store.vector(p.w, "model.norm.weight", H), float(c.norm_eps), N, H,
                  stream);
  // Rows to score: all, or each sequence's last new token (generation).
  std::vector<int64_t> row_of;  // row of the batch -> reported row index
  const float* rows_in = N;
  int64_t rows = p.n;
  const bool last_only = p.observer.lastLogitsOnly();
  if (last_only) {
    std::vector<int32_t> pick;
    for (std::size_t s = 0; s < p.slots.size(); ++s)
      if (p.slots[s].tokens > 0) {
        pick.push_back(static_cast<int32_t>(p.slots[s].offset + p.slots[s].tokens - 1));
        row_of.push_back(static_cast<int64_t>(s));
      }
    upload(row_index, pick.data(), int64_t(pick.size()));
    rows = int64_t(pick.size());
    float* HR = scratch<float>(head_rows, rows * H);
    ek::gatherRows(N, H, row_index.as<int32_t>(), nullptr, rows, HR, stream);
    rows_in = HR;
  }
  const DeviceMatrix& lm = store.matrix(p.w, c.lm_head, V, H);
  const int32_t* targets_host = last_only ? nullptr : p.observer.targets();
  const int64_t block = std::clamp<int64_t>(kLogitBytes / (V * 4), 1, 8192);
  float* LG = scratch<float>(logits, std::min(block, std::max<int64_t>(rows, 1)) * V);
  std::vector<float> host_logits;
  std::vector<double> host_nll;
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t m = std::min(block, rows - r0);
    gemm(rows_in + r0 * H, m, lm, LG);
    if (c.logits_scaling != 1.0) ek::divide(LG, m * V, float(c.logits_scaling), stream);
    if (targets_host) {
      upload(targets, targets_host + r0, m);
      double* NL = scratch<double>(nll, m);
      ek::tokenNll(LG, m, V, targets.as<int32_t>(), NL, stream);
      host_nll.resize(static_cast<std::size_t>(m));
      download(NL, m, host_nll.data());
      p.observer.onTokenNll(r0, m, host_nll.data());
    } else {
      host_logits.resize(static_cast<std::size_t>(m * V));
      download(LG, m * V, host_logits.data());
      if (last_only) {
        for (int64_t r = 0; r < m; ++r) p.observer.onLogits(row_of[r0 + r], 1, host_logits.data() + r * V, V);
      } else {
        p.observer.onLogits(r0, m, host_logits.data(), V);
      }
    }
  }
}

ForwardStats DeviceEngine::Impl::run(Pass& p) {
  const ModelConfig& c = p.c;
  store.useProvider(p.engine.weightsPtr().get());
  p.n = p.batch.tokens();
  ForwardStats& stats = p.stats;
  if (p.n == 0) return stats;  // token ids were checked by MoeEngine::forward / extend
  p.slots.resize(static_cast<std::size_t>(p.batch.sequences()));
  std::vector<int64_t> pos(static_cast<std::size_t>(p.n));
  int64_t max_pos = 1;
  for (int s = 0; s < p.batch.sequences(); ++s) {
    SequenceSlot& sl = p.slots[s];
    sl.offset = p.batch.offsets[s];
    sl.tokens = p.batch.length(s);
    sl.past = p.state ? p.state->lengths[s] : 0;
    for (int64_t t = 0; t < sl.tokens; ++t) pos[sl.offset + t] = sl.past + t;
    max_pos = std::max(max_pos, sl.past + sl.tokens);
    if (p.state) p.state->reserve(s, sl.past + sl.tokens, stream);
  }
  uploadRope(p, max_pos);
  upload(positions, pos.data(), p.n);
  upload(ids, p.batch.ids.data(), p.n);
  store.beginStep();
  const DeviceMatrix& embed = store.matrix(p.w, "model.embed_tokens.weight", c.vocab, c.hidden);
  ek::embedRows(embed.data, embed.bf16, ids.as<int32_t>(), p.n, c.hidden, float(c.embedding_multiplier),
                scratch<float>(x, p.n * c.hidden), stream);
  scratch<float>(normed, p.n * c.hidden);

  const int steps = c.layers + 1;
  auto report = [&](int done, const std::string& stage) {
    if (!p.progress) return;
    if (!p.progress->report(p.progress_begin + p.progress_span * done / steps, stage)) throw Cancelled{};
  };
  for (int layer = 0; layer < c.layers; ++layer) {
    if (p.progress) p.progress->check();
    store.beginStep();
    attention(p, layer);
    moe(p, layer);
    report(layer + 1, fmt::format("layer {}/{}", layer + 1, c.layers));
  }
  if (p.observer.wantsLogits()) {
    store.beginStep();
    head(p);
  }
  cudaCheck(cudaStreamSynchronize(stream), "the forward pass");
  if (p.state)
    for (std::size_t s = 0; s < p.slots.size(); ++s) p.state->lengths[s] += p.slots[s].tokens;
  report(steps, "head");
  stats.peak_activation_bytes = scratchBytes();
  stats.peak_weight_bytes = store.residentBytes();
  this->stats.peak_scratch_bytes = std::max<uint64_t>(this->stats.peak_scratch_bytes, scratchBytes());
  ++this->stats.passes;
  return stats;
}

std::shared_ptr<DeviceEngine> DeviceEngine::create(const DeviceEngineOptions& options, std::string* why) {
  std::string reason;
  if (!deviceAvailable(&reason)) {
    if (why) *why = reason;
    return nullptr;
  }
  auto impl = std::make_unique<Impl>(options, options.precision == DeviceEngineOptions::Precision::Bf16);
  DeviceInfo info;
  if (auto st = deviceInfo(&info); !st.ok()) {
    if (why) *why = st.message;
    return nullptr;
  }
  impl->description = fmt::format("{} (sm_{}{}, {:.1f} GiB)", info.name, info.major, info.minor,
                                  info.global_memory_bytes / 1073741824.0);
  if (cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking) != cudaSuccess ||
      cublasCreate(&impl->cublas) != CUBLAS_STATUS_SUCCESS ||
      cublasSetStream(impl->cublas, impl->stream) != CUBLAS_STATUS_SUCCESS) {
    if (why) *why = "could not create a CUDA stream and a cuBLAS handle";
    return nullptr;
  }
  impl->store.setStream(impl->stream);
  impl->store.setNativeInt3(impl->bf16());
  // cuBLAS's own workspace for this stream: without one, GEMMs that want it (bf16 inputs, split-K) fall
  // back to slower algorithms or allocate on the fly.
  impl->cublas_workspace.grow(64u << 20);
  if (cublasSetWorkspace(impl->cublas, impl->cublas_workspace.as(), impl->cublas_workspace.bytes()) !=
      CUBLAS_STATUS_SUCCESS) {
    if (why) *why = "could not give cuBLAS its workspace";
    return nullptr;
  }
  size_t free_bytes = 0, total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  if (impl->options.memory_limit == 0) impl->options.memory_limit = static_cast<uint64_t>(free_bytes * 0.9);
  // Weights get what the activations and caches leave; the scratch of a pass is bounded by its batch.
  impl->store.setLimit(impl->options.memory_limit - std::min<uint64_t>(impl->options.memory_limit / 4, 4ull << 30));
  return std::shared_ptr<DeviceEngine>(new DeviceEngine(std::move(impl)));
}

DeviceEngine::DeviceEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceEngine::~DeviceEngine() = default;

std::string DeviceEngine::unsupported(const engine::MoeEngine& engine, const ForwardObserver&) const {
  (void)engine;
  return {};
}

ForwardStats DeviceEngine::forward(const engine::MoeEngine& engine, const SequenceBatch& batch,
                                   ForwardObserver& observer, engine::DecodeState* state, ProgressReporter* progress,
                                   double progress_begin, double progress_span) {
  DeviceDecodeState* device_state = nullptr;
  if (state) {
    device_state = dynamic_cast<DeviceDecodeState*>(state);
    if (!device_state || device_state->owner != this)
      throw Error("cuda engine: this KV cache was made by another engine");
    if (engine.kvCachePolicy())
      throw Error("cuda engine: KV-cache formats (--kv) are not applied during generation");
  }
  const std::lock_guard lock(impl_->mutex);
  Impl::Pass pass(engine, batch, observer, device_state, progress, progress_begin, progress_span,
                  engine::currentLinearInputTap());
  return impl_->run(pass);
}

void DeviceEngine::prepare(const engine::MoeEngine& engine, const SequenceBatch* typical) {
  // Weights only when every one fits: a streamed model uploads its layers during each pass anyway.
  uint64_t bytes = engine.embeddingAndHeadBytes();
  for (int l = 0; l < engine.config().layers; ++l) bytes += engine.layerWeightBytes(l);
  if (impl_->bf16()) bytes /= 2;
  // Sees the pass like a perplexity run (targets, so the loss kernels warm up too) and keeps nothing.
  struct Discard : ForwardObserver {
    std::vector<int32_t> none;
    const int32_t* targets() const override { return none.data(); }
  } discard;
  const std::lock_guard lock(impl_->mutex);
  if (bytes <= impl_->store.limit()) {
    engine::SequenceBatch one;
    const int32_t id = engine.config().bos_token_id.value_or(0);
    one.add(std::span<const int32_t>(&id, 1));
    discard.none.assign(1, -1);
    Impl::Pass pass(engine, one, discard, nullptr, nullptr, 0, 1, nullptr, true);
    impl_->run(pass);
  }
  if (typical && typical->tokens() > 0) {
    discard.none.assign(static_cast<std::size_t>(typical->tokens()), -1);
    Impl::Pass pass(engine, *typical, discard);
    impl_->run(pass);
  }
}

std::unique_ptr<engine::DecodeState> DeviceEngine::newDecodeState(const engine::MoeEngine& engine, int sequences) {
  const ModelConfig& c = engine.config();
  const int64_t key_dim = c.mla ? c.qk_nope_dim + c.qk_rope_dim : c.head_dim;
  const int64_t value_dim = c.mla ? c.v_head_dim : c.head_dim;
  return std::make_unique<DeviceDecodeState>(this, c.layers, sequences, c.kv_heads * key_dim, c.kv_heads * value_dim);
}

const std::string& DeviceEngine::deviceDescription() const {
  return impl_->description;
}
const DeviceEngineOptions& DeviceEngine::options() const {
  return impl_->options;
}
DeviceEngineStats DeviceEngine::stats() const {
  const std::lock_guard lock(impl_->mutex);
  DeviceEngineStats s = impl_->stats;
  s.uploaded_weight_bytes = impl_->store.uploadedBytes();
  s.resident_weight_bytes = impl_->store.residentBytes();
  s.evicted_weight_bytes = impl_->store.evictedBytes();
  s.native_int3_matrices = impl_->store.nativeInt3Matrices();
  s.dequantized_matrices = impl_->store.dequantizedMatrices();
  s.dequantized_reason = impl_->store.dequantizedReason();
  return s;
}

}  // namespace moewb::gpu

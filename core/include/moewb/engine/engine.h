// SPDX-License-Identifier: MIT
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/engine/forward_backend.h"
#include "moewb/engine/linear_backend.h"
#include "moewb/engine/model_config.h"
#include "moewb/engine/weight_provider.h"
#include "moewb/progress.h"

namespace moewb::engine {

class KvCachePolicy;   // moewb/engine/kv_cache.h
class CpuDecodeState;  // the CPU engine's KV cache (core/src/engine/cpu_decode_state.h)

// Several token sequences packed back to back: sequence s is ids[offsets[s], offsets[s+1]).
// Positions restart at 0 in every sequence; sequences never attend to each other.
struct SequenceBatch {
  std::vector<int32_t> ids;
  std::vector<int64_t> offsets{0};
  void add(std::span<const int32_t> sequence);
  int64_t tokens() const { return static_cast<int64_t>(ids.size()); }
  int sequences() const { return static_cast<int>(offsets.size()) - 1; }
  int64_t length(int s) const { return offsets[s + 1] - offsets[s]; }
};

// The routing decision of one MoE layer for every token of the batch.
struct RoutingView {
  int layer = 0;      // decoder layer index
  int moe_index = 0;  // position among the MoE layers
  int64_t tokens = 0;
  int top_k = 0;
  int num_experts = 0;
  const int32_t* experts = nullptr;  // [tokens, top_k], best first
  const float* weights = nullptr;    // [tokens, top_k], the weights applied to the experts' outputs
                                     // (Llama 4: to their inputs)
};

// Keys (after RoPE) and values of one layer and sequence, as the attention uses them.
struct KeyValueView {
  int layer = 0, sequence = 0;
  int64_t length = 0;
  int kv_heads = 0, key_dim = 0, value_dim = 0;
  // Element (t, h, d) of K is keys[t * key_row_stride + h * key_dim + d]; V likewise.
  const float* keys = nullptr;
  const float* values = nullptr;
  int64_t key_row_stride = 0, value_row_stride = 0;
};

// What a measurement wants to see while the batch runs. Callbacks come from the thread that called
// forward() except onAttention, which runs on worker threads (one call per sequence and head, never two
// for the same (layer, sequence, head)).
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  virtual void onRouting(const RoutingView&) {}
  virtual bool wantsAttention() const { return false; }
  // Softmax probabilities [length, length] row-major (query x key), zero where masked. With attention
  // sinks (gpt-oss) a row sums to less than one: the sink's share is dropped, as in HF.
  virtual void onAttention(int /*layer*/, int /*sequence*/, int /*head*/, const float* /*probs*/,
                           int64_t /*length*/) {}
  virtual bool wantsKeysValues() const { return false; }
  virtual void onKeysValues(const KeyValueView&) {}
  // Final logits of rows [row_begin, row_begin + rows) of the batch: [rows, vocab] row-major.
  virtual bool wantsLogits() const { return true; }
  // With lastLogitsOnly() the head runs only on each sequence's last token (generation): onLogits then
  // gets rows indexed by sequence, row s = the last token of sequence s.
  virtual bool lastLogitsOnly() const { return false; }
  virtual void onLogits(int64_t /*row_begin*/, int64_t /*rows*/, const float* /*logits*/, int64_t /*vocab*/) {
  }
  // Perplexity without the logits: targets()[r] is the id row r of the batch should predict (-1: none).
  // A backend that keeps the logits where it computes them (the GPU) then calls onTokenNll with
  // -log softmax(logits)[target] per row (0 for rows without a target) instead of onLogits; the CPU
  // engine keeps calling onLogits.
  virtual const int32_t* targets() const { return nullptr; }
  virtual void onTokenNll(int64_t /*row_begin*/, int64_t /*rows*/, const double* /*nll*/) {}
};

// What one forward pass cost.
struct ForwardStats {
  uint64_t peak_activation_bytes = 0;  // the contiguous activation buffers of the batch
  uint64_t peak_weight_bytes = 0;  // float32 weights resident at once (one layer's attention or one expert)
  // With a KV-cache policy: what the cache of the pass stores (bits, packed) for how many K/V elements.
  uint64_t kv_stored_bits = 0, kv_elements = 0;
};

// A decoder-only MoE transformer on the CPU (Eigen, float32 with float64 reductions where they matter),
// reproducing Hugging Face transformers for the families parseModelConfig accepts.
//
// Layer streaming: the whole batch advances one layer at a time through a contiguous activation buffer,
// and only the weights of the step being computed are resident (a layer's attention, then its router and
// one expert at a time); they are read from the memory-mapped checkpoint (or a WeightProvider) and dropped
// after use, so models larger than memory run. MoE layers are batched per expert: the tokens routed to an
// expert are gathered, multiplied in one GEMM per projection and scattered back.
class MoeEngine {
 public:
  explicit MoeEngine(std::shared_ptr<const Checkpoint> ckpt,
                     std::shared_ptr<const WeightProvider> weights = nullptr);
  // Opens a checkpoint (directory, index JSON or .safetensors file); throws moewb::Error.
  static std::unique_ptr<MoeEngine> open(const std::string& path);

  const ModelConfig& config() const { return config_; }
  const Checkpoint& checkpoint() const { return *ckpt_; }
  std::shared_ptr<const Checkpoint> checkpointPtr() const { return ckpt_; }
  const WeightProvider& weights() const { return *weights_; }
  const std::shared_ptr<const WeightProvider>& weightsPtr() const { return weights_; }
  // Evaluates another variant (original or quantized) with the same engine.
  void setWeights(std::shared_ptr<const WeightProvider> weights);
  // Where the weight GEMMs run (e.g. gpu::CublasLinearBackend); nullptr, the default, is the CPU.
  // forward() installs it for its own thread only, so engines with different backends can run side by
  // side. A backend shared by engines on several threads must serialise itself. Set it between forward
  // passes, not while one of this engine runs.
  void setLinearBackend(std::shared_ptr<LinearBackend> backend) { linear_backend_ = std::move(backend); }
  const std::shared_ptr<LinearBackend>& linearBackend() const { return linear_backend_; }
  // A KV-cache format per (layer, chunk) (moewb/engine/kv_cache.h), applied to K (after RoPE) and V of
  // every layer before the attention and the observers see them; nullptr, the default, keeps them float32.
  // Set it between forward passes.
  void setKvCachePolicy(std::shared_ptr<const KvCachePolicy> policy) { kv_policy_ = std::move(policy); }
  const std::shared_ptr<const KvCachePolicy>& kvCachePolicy() const { return kv_policy_; }
  // Where whole forward passes run (gpu::DeviceEngine); nullptr, the default, is the CPU engine. A pass the
  // backend cannot run (ForwardBackend::unsupported) runs on the CPU; forwardFallbackReason() says why.
  // Set it between forward passes.
  void setForwardBackend(std::shared_ptr<ForwardBackend> backend) { forward_backend_ = std::move(backend); }
  const std::shared_ptr<ForwardBackend>& forwardBackend() const { return forward_backend_; }
  // Loads the forward backend's resident state (its weights) now and warms it up on `typical` (optional,
  // see ForwardBackend::prepare); returns the seconds it took (0 on the CPU). Evaluations call it before
  // their clock starts and report the time apart.
  double prepareBackend(const SequenceBatch* typical = nullptr) const;
  // Why the last pass did not run on the forward backend ("" when it did or none is set).
  std::string forwardFallbackReason() const;

  // Runs the batch; observers see routing, attention, K/V and logits as they are produced. Progress
  // fractions run from progress_begin to progress_begin + progress_span; a false return of the progress
  // callback throws moewb::Cancelled at the next layer boundary.
  ForwardStats forward(const SequenceBatch& batch, ForwardObserver& observer,
                       ProgressReporter* progress = nullptr, double progress_begin = 0,
                       double progress_span = 1) const;

  // Generation: an empty KV cache for `sequences` sequences (on the forward backend when one is set), and
  // a pass over the new tokens of each sequence (batch.sequences() == state.sequences(); a sequence may get
  // none) that continues after the tokens the state has seen: positions go on from state.length(s), the new
  // tokens attend to the cached keys and values, and their own are appended. Observers see the new tokens
  // only. Throws moewb::Error for a state of another engine or backend.
  std::unique_ptr<DecodeState> newDecodeState(int sequences) const;
  ForwardStats extend(DecodeState& state, const SequenceBatch& batch, ForwardObserver& observer,
                      ProgressReporter* progress = nullptr) const;

  // Logits [length, vocab] of one sequence (tests, small prompts).
  MatrixRM logits(std::span<const int32_t> ids) const;

  // Float32 bytes of one decoder layer's weights (attention, router, all experts) and of the
  // embedding + head, from the tensor shapes: for memory reports.
  uint64_t layerWeightBytes(int layer) const;
  uint64_t embeddingAndHeadBytes() const;

 private:
  struct Buffers;
  ForwardStats cpuForward(const SequenceBatch& batch, ForwardObserver& observer, CpuDecodeState* state,
                          ProgressReporter* progress, double progress_begin, double progress_span) const;
  void attentionStep(int layer, const SequenceBatch& batch, Buffers& buf, ForwardObserver& observer,
                     ForwardStats& stats) const;
  void mlpStep(int layer, const SequenceBatch& batch, Buffers& buf, ForwardObserver& observer,
               ForwardStats& stats) const;
  void denseMlp(const std::string& prefix, int64_t intermediate, const float* x, int64_t n, float* out,
                ForwardStats& stats) const;
  void headStep(Buffers& buf, ForwardObserver& observer, ForwardStats& stats) const;

  std::shared_ptr<const Checkpoint> ckpt_;
  std::shared_ptr<const WeightProvider> weights_;
  ModelConfig config_;
  std::shared_ptr<LinearBackend> linear_backend_;
  std::shared_ptr<const KvCachePolicy> kv_policy_;
  std::shared_ptr<ForwardBackend> forward_backend_;
  mutable std::mutex fallback_mutex_;
  mutable std::string forward_fallback_reason_;
};

}  // namespace moewb::engine

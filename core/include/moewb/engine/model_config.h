// SPDX-License-Identifier: MIT
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moewb/checkpoint.h"

namespace moewb::engine {

// How the router turns logits into the top-k experts and their weights.
enum class RouterScoring {
  SoftmaxTopK,        // softmax over all experts, top-k (Mixtral, Qwen2/3-MoE, OLMoE, DeepSeek-V2)
  SigmoidBiasedTopK,  // sigmoid scores, selection on scores + e_score_correction_bias (DeepSeek-V3)
  TopKSoftmax,        // top-k of the logits, softmax over the k chosen (gpt-oss, GraniteMoE)
  TopKSigmoid         // top-k of the logits, sigmoid of each chosen logit (Llama 4)
};

// The gated activation between an expert's gate/up and down projections.
enum class ExpertActivation {
  SwiGLU,        // silu(gate) * up
  ClampedSwiGLU  // gpt-oss: gate <= limit, |up| <= limit, (up + 1) * gate * sigmoid(alpha * gate)
};

// What one decoder layer's attention sees: the mask and whether keys/queries are rotated.
struct LayerAttention {
  int sliding_window = 0;  // keys in the last `sliding_window` positions, the query's included; 0: all
  int chunk = 0;           // keys in the query's chunk [p - p % chunk, p] (Llama 4); 0: no chunks
  bool rope = true;        // false: a NoPE layer (Llama 4 `no_rope_layers`)
};

// RoPE as named by the config (`rope_parameters` in transformers 5, `rope_theta` + `rope_scaling` before).
struct RopeConfig {
  std::string type = "default";  // default | linear | dynamic | llama3 | yarn
  double theta = 10000.0;
  double factor = 1.0;
  int rotary_dim = 0;        // dimensions rotated per head (partial rotary when smaller than the head)
  bool interleaved = false;  // rotate pairs (2i, 2i+1) (DeepSeek MLA, Llama 4) instead of halves (i, i+d/2)
  int original_max_positions = 0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  double mscale = 0.0, mscale_all_dim = 0.0;  // yarn; 0 where config.json has none (HF tests truthiness)
  std::optional<double> attention_factor;     // yarn
  bool truncate = true;                       // yarn: round the correction range to integers
};

// Everything the engine needs to run a decoder-only MoE transformer, read from config.json and
// checked against the checkpoint's tensors. Fields keep HF's meaning.
struct ModelConfig {
  std::string model_type;
  int hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  double norm_eps = 1e-6;
  bool tie_embeddings = false;
  bool qkv_bias = false, o_bias = false;
  // Qwen3: RMSNorm per head before RoPE; OLMoE: over the whole projection before RoPE; Llama 4: a
  // weightless RMS ("L2") norm per head *after* RoPE, on RoPE layers only.
  enum class QkNorm { None, PerHead, WholeProjection, L2AfterRope } qk_norm = QkNorm::None;
  std::optional<double> clip_qkv;               // OLMoE
  std::vector<LayerAttention> layer_attention;  // per layer (sliding window, chunks, NoPE)
  RopeConfig rope;
  bool attention_sinks = false;  // gpt-oss: a learned logit per head joins every softmax row, then is dropped
  // Llama 4 NoPE layers: queries at position p scaled by log1p(floor((p + 1) / floor_scale)) * attn_scale
  // + 1.
  bool temperature_tuning = false;
  double floor_scale = 8192, attn_scale = 0.1;
  // Granite: embeddings times embedding_multiplier, each block's output times residual_multiplier before
  // the residual add, logits divided by logits_scaling (all 1 elsewhere; attention_scale is Granite's
  // attention_multiplier).
  double embedding_multiplier = 1.0, residual_multiplier = 1.0, logits_scaling = 1.0;

  // Multi-head latent attention (DeepSeek-V2/V3).
  bool mla = false;
  int q_lora_rank = 0, kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;
  // Softmax scale of every family: 1/sqrt(d), times YaRN's mscale^2 for DeepSeek, Granite's
  // attention_multiplier instead.
  double attention_scale = 0;

  // Mixture of experts.
  std::vector<bool> moe_layer;  // per layer: routed experts (true) or a dense MLP
  int num_experts = 0, top_k = 0, moe_intermediate = 0, dense_intermediate = 0;
  bool norm_topk_prob = true;
  double routed_scaling = 1.0;
  RouterScoring scoring = RouterScoring::SoftmaxTopK;
  int n_group = 0, topk_group = 0;  // grouped top-k (DeepSeek); 0 = off
  int shared_intermediate = 0;      // 0: no shared expert
  bool shared_expert_gate = false;  // Qwen2-MoE: sigmoid(gate(x)) scales the shared expert
  bool router_bias = false;         // gpt-oss: the router is a Linear with bias
  ExpertActivation activation = ExpertActivation::SwiGLU;
  double glu_alpha = 1.702, glu_limit = 7.0;  // ClampedSwiGLU (HF's GptOssExperts constants)
  // Llama 4 multiplies the expert's *input* by the routing weight (HF's Llama4TextMoe), not its output.
  bool weight_on_input = false;

  // Tensor naming, detected from the checkpoint.
  std::string moe_module;            // "block_sparse_moe", "mlp" or "feed_forward"
  std::string router_module;         // inside moe_module: "gate", "router" or "router.layer" (Granite)
  std::string dense_module = "mlp";  // dense layers' MLP: "mlp" or "feed_forward" (Llama 4)
  std::string shared_module;         // "shared_expert" or "shared_experts"
  std::string expert_gate, expert_up, expert_down;  // "w1","w3","w2" or "gate_proj","up_proj","down_proj"
  // Fused 3-D expert tensors (gpt-oss, Llama 4, GraniteMoE), names inside moe_module; expert e is the
  // catalog's slice "<name>[e]" as an [out, in] matrix (WeightMatrix::name, what replacements are keyed by).
  bool fused_experts = false;
  std::string fused_gate_up, fused_down;  // "experts.gate_up_proj", "input_linear.weight", ...
  bool gate_up_interleaved = false;       // gpt-oss: gate = even outputs, up = odd; else halves [gate; up]
  bool expert_bias = false;  // gpt-oss: "<fused_gate_up>_bias" [E, 2I], "<fused_down>_bias" [E, H]
  std::string lm_head = "lm_head.weight";

  std::optional<int32_t> bos_token_id, eos_token_id;

  int numMoeLayers() const;
  // Position of `layer` among the MoE layers, or -1 for a dense one.
  int moeIndex(int layer) const;
  std::string describe() const;  // one line for logs and reports
};

// Reads the checkpoint's config.json and checks that the engine can run it. Unsupported families or
// features throw moewb::Error naming model_type and what is missing; a missing required key or a value of
// the wrong type throws moewb::Error naming config.json, the key and what was expected.
ModelConfig parseModelConfig(const Checkpoint& ckpt);

}  // namespace moewb::engine

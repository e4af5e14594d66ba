// SPDX-License-Identifier: MIT
#include "moewb/engine/model_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "moewb/error.h"

namespace moewb::engine {
namespace {

using json = nlohmann::json;

const char* kSupported =
    "mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2, deepseek_v3, granitemoe, gpt_oss, llama4_text";

// Families we know and deliberately refuse, with what the engine lacks for them.
std::string refusalReason(const std::string& type) {
  if (type == "switch_transformers" || type == "nllb_moe")
    return "it is an encoder-decoder model (relative attention bias, cross-attention); the engine runs "
           "decoder-only transformers";
  if (type == "llama4")
    return "it is the multimodal Llama 4 wrapper (text_config inside); a llama4_text checkpoint of the "
           "language model runs";
  if (type == "granitemoeshared" || type == "granitemoehybrid")
    return "the shared-expert / Mamba-hybrid Granite variants are not implemented (granitemoe is)";
  if (type == "phimoe") return "LayerNorm with biases and SparseMixer routing are not implemented";
  if (type == "jetmoe") return "mixture-of-attention-heads is not implemented";
  if (type == "dbrx") return "the fused Wqkv attention and DBRX expert layout are not implemented";
  if (type.empty()) return "config.json has no model_type";
  return "this family is not implemented";
}

// Typed access to config.json (or an object inside it, e.g. rope_parameters). A JSON null counts as absent,
// as HF's Python defaults treat None; a value of another type is an error naming the key and the type
// expected, never a JSON library exception.
class ConfigReader {
 public:
  ConfigReader(const json& object, std::string where, std::string prefix = {})
      : j_(object), where_(std::move(where)), prefix_(std::move(prefix)) {}

  bool has(const char* key) const {
    auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }
  std::optional<int> optInt(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return std::nullopt;
    // Integral floats (64.0) are accepted; JSON writers sometimes produce them.
    if (it->is_number_integer() ||
        (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>())) {
      const double v = it->get<double>();
      if (v >= INT_MIN && v <= INT_MAX) return static_cast<int>(v);
    }
    wrongType(key, *it, "an integer");
  }
  int intOr(const char* key, int fallback) const { return optInt(key).value_or(fallback); }
  std::optional<double> optDouble(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) wrongType(key, *it, "a number");
    return it->get<double>();
  }
  double doubleOr(const char* key, double fallback) const { return optDouble(key).value_or(fallback); }
  bool boolOr(const char* key, bool fallback) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) wrongType(key, *it, "true or false");
    return it->get<bool>();
  }
  std::string stringOr(const char* key, const std::string& fallback) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return fallback;
    if (!it->is_string()) wrongType(key, *it, "a string");
    return it->get<std::string>();
  }
  std::optional<std::vector<int>> optIntList(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return std::nullopt;
    if (!it->is_array()) wrongType(key, *it, "a list of integers");
    std::vector<int> out;
    for (const auto& v : *it) {
      if (!v.is_number_integer()) wrongType(key, *it, "a list of integers");
      out.push_back(v.get<int>());
    }
    return out;
  }
  std::optional<std::vector<std::string>> optStringList(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return std::nullopt;
    if (!it->is_array()) wrongType(key, *it, "a list of strings");
    std::vector<std::string> out;
    for (const auto& v : *it) {
      if (!v.is_string()) wrongType(key, *it, "a list of strings");
      out.push_back(v.get<std::string>());
    }
    return out;
  }
  // A required positive integer (sizes and counts): missing, mistyped and non-positive values are errors.
  int need(const char* key, const std::string& model_type) const {
    auto v = optInt(key);
    if (!v)
      throw Error(fmt::format("{}: '{}{}' is missing ({}): a positive integer expected", where_, prefix_, key,
                              model_type));
    if (*v <= 0)
      throw Error(fmt::format("{}: '{}{}' is {}, expected a positive integer", where_, prefix_, key, *v));
    return *v;
  }
  // An optional size: absent gives the fallback, present must be positive.
  int positiveOr(const char* key, int fallback) const {
    auto v = optInt(key);
    if (v && *v <= 0)
      throw Error(fmt::format("{}: '{}{}' is {}, expected a positive integer", where_, prefix_, key, *v));
    return v.value_or(fallback);
  }
  const std::string& where() const { return where_; }

 private:
  [[noreturn]] void wrongType(const char* key, const json& value, const char* expected) const {
    std::string shown = value.dump();
    if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
    throw Error(fmt::format("{}: '{}{}' is {}, expected {}", where_, prefix_, key, shown, expected));
  }
  const json& j_;
  std::string where_, prefix_;
};

std::optional<int32_t> optionalId(const json& c, const char* key, const std::string& where) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return std::nullopt;
  const json& v = it->is_array() ? (it->empty() ? json() : (*it)[0]) : *it;
  if (v.is_null()) return std::nullopt;
  if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
    throw Error(fmt::format("{}: '{}' is {}, expected a token id (an integer or a list of them)", where, key,
                            it->dump()));
  return v.get<int32_t>();
}

RopeConfig readRope(const ConfigReader& cfg, const json& c) {
  RopeConfig r;
  // transformers 5: rope_parameters {rope_type, rope_theta, ...}; transformers 4: rope_theta + rope_scaling.
  const char* section = nullptr;
  if (c.contains("rope_parameters") && c["rope_parameters"].is_object())
    section = "rope_parameters";
  else if (c.contains("rope_scaling") && c["rope_scaling"].is_object())
    section = "rope_scaling";
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (c.contains(key) && !c[key].is_null() && !c[key].is_object())
      throw Error(fmt::format("{}: '{}' is {}, expected an object", cfg.where(), key, c[key].dump()));
  const json empty = json::object();
  const ConfigReader p(section ? c[section] : empty, cfg.where(), section ? std::string(section) + "." : "");
  r.theta = p.doubleOr("rope_theta", cfg.doubleOr("rope_theta", 10000.0));
  r.type = p.stringOr("rope_type", p.stringOr("type", "default"));
  r.factor = p.doubleOr("factor", 1.0);
  r.original_max_positions =
      p.intOr("original_max_position_embeddings", cfg.intOr("max_position_embeddings", 0));
  r.low_freq_factor = p.doubleOr("low_freq_factor", 1.0);
  r.high_freq_factor = p.doubleOr("high_freq_factor", 4.0);
  r.beta_fast = p.doubleOr("beta_fast", 32.0);
  r.beta_slow = p.doubleOr("beta_slow", 1.0);
  r.mscale = p.doubleOr("mscale", 0.0);
  r.mscale_all_dim = p.doubleOr("mscale_all_dim", 0.0);
  r.attention_factor = p.optDouble("attention_factor");
  r.truncate = p.boolOr("truncate", true);
  static const std::vector<std::string> known = {"default", "linear", "dynamic", "llama3", "yarn"};
  if (std::find(known.begin(), known.end(), r.type) == known.end())
    throw Error(fmt::format("{}: RoPE type '{}' is not supported (default, linear, dynamic, llama3, yarn)",
                            cfg.where(), r.type));
  return r;
}

bool has(const Checkpoint& ck, const std::string& name) {
  return ck.find(name).has_value();
}

// Per-layer list from config.json that must cover every layer.
template <typename T>
void requireLength(const std::vector<T>& v, int layers, const char* key, const std::string& where) {
  if (static_cast<int>(v.size()) < layers)
    throw Error(
        fmt::format("{}: '{}' has {} entries, expected one per layer ({})", where, key, v.size(), layers));
}

// The family-specific part of the configuration.
void readMixtral(const ConfigReader& cfg, ModelConfig& m) {
  m.moe_intermediate = cfg.need("intermediate_size", m.model_type);
  m.norm_topk_prob = true;
  const int window = std::max(0, cfg.intOr("sliding_window", 0));  // null or 0: no window
  for (auto& a : m.layer_attention) a.sliding_window = window;
}

void readQwen(const ConfigReader& cfg, ModelConfig& m) {
  const bool qwen2 = m.model_type == "qwen2_moe";
  m.moe_intermediate = cfg.need("moe_intermediate_size", m.model_type);
  m.dense_intermediate = cfg.positiveOr("intermediate_size", 0);
  m.norm_topk_prob = cfg.boolOr("norm_topk_prob", false);
  const int step = cfg.intOr("decoder_sparse_step", 1);
  const std::vector<int> mlp_only = cfg.optIntList("mlp_only_layers").value_or(std::vector<int>{});
  for (int l = 0; l < m.layers; ++l)
    m.moe_layer[l] =
        std::find(mlp_only.begin(), mlp_only.end(), l) == mlp_only.end() && step > 0 && (l + 1) % step == 0;
  if (cfg.boolOr("use_sliding_window", false))
    throw Error(
        fmt::format("{}: use_sliding_window=true ({}) is not implemented", cfg.where(), m.model_type));
  if (!qwen2) m.qk_norm = ModelConfig::QkNorm::PerHead;
  if (qwen2) {
    m.shared_intermediate = cfg.positiveOr("shared_expert_intermediate_size", 0);
    m.shared_module = "shared_expert";
    m.shared_expert_gate = true;
  }
}

void readOlmoe(const ConfigReader& cfg, ModelConfig& m) {
  m.moe_intermediate = cfg.need("intermediate_size", m.model_type);
  m.norm_topk_prob = cfg.boolOr("norm_topk_prob", false);
  m.qk_norm = ModelConfig::QkNorm::WholeProjection;
  m.clip_qkv = cfg.optDouble("clip_qkv");
}

void readDeepseek(const ConfigReader& cfg, ModelConfig& m) {
  const bool dsv3 = m.model_type == "deepseek_v3";
  const std::string& t = m.model_type;
  m.mla = true;
  m.q_lora_rank = cfg.positiveOr("q_lora_rank", 0);
  m.kv_lora_rank = cfg.need("kv_lora_rank", t);
  m.qk_nope_dim = cfg.need("qk_nope_head_dim", t);
  m.qk_rope_dim = cfg.need("qk_rope_head_dim", t);
  m.v_head_dim = cfg.need("v_head_dim", t);
  m.kv_heads = m.heads;
  m.head_dim = m.qk_nope_dim + m.qk_rope_dim;
  m.rope.rotary_dim = m.qk_rope_dim;
  m.rope.interleaved = !dsv3 || cfg.boolOr("rope_interleave", true);
  m.moe_intermediate = cfg.need("moe_intermediate_size", t);
  m.dense_intermediate = cfg.positiveOr("intermediate_size", 0);
  const int first_dense = cfg.intOr("first_k_dense_replace", 0);
  const int freq = cfg.intOr("moe_layer_freq", 1);
  for (int l = 0; l < m.layers; ++l) m.moe_layer[l] = l >= first_dense && freq > 0 && l % freq == 0;
  m.routed_scaling = cfg.doubleOr("routed_scaling_factor", 1.0);
  m.norm_topk_prob = cfg.boolOr("norm_topk_prob", false);
  m.shared_intermediate = m.moe_intermediate * cfg.intOr("n_shared_experts", 0);
  m.shared_module = "shared_experts";
  const std::string method = cfg.stringOr("topk_method", dsv3 ? "noaux_tc" : "greedy");
  if (dsv3 || method == "noaux_tc") {
    m.scoring = RouterScoring::SigmoidBiasedTopK;
    const std::string scoring = cfg.stringOr("scoring_func", "sigmoid");
    if (scoring != "sigmoid")
      throw Error(
          fmt::format("{}: scoring_func '{}' with noaux_tc routing is not supported", cfg.where(), scoring));
  }
  if (method == "group_limited_greedy" || method == "noaux_tc") {
    m.n_group = cfg.positiveOr("n_group", 1);
    m.topk_group = cfg.positiveOr("topk_group", m.n_group);
  } else if (method != "greedy") {
    throw Error(fmt::format("{}: topk_method '{}' is not supported (greedy, group_limited_greedy, noaux_tc)",
                            cfg.where(), method));
  }
  double scale = 1.0 / std::sqrt(static_cast<double>(m.head_dim));
  // HF's yarn_apply_mscale: any RoPE type but default with a truthy mscale_all_dim scales the softmax by
  // mscale(factor, mscale_all_dim)^2, where mscale is 1 for factor <= 1.
  if (m.rope.type != "default" && m.rope.mscale_all_dim != 0 && m.rope.factor > 1) {
    const double ms = 0.1 * m.rope.mscale_all_dim * std::log(m.rope.factor) + 1.0;
    scale *= ms * ms;
  }
  m.attention_scale = scale;
}

void readGranite(const ConfigReader& cfg, ModelConfig& m) {
  m.moe_intermediate = cfg.need("intermediate_size", m.model_type);
  m.scoring = RouterScoring::TopKSoftmax;
  m.norm_topk_prob = true;  // the softmax over the chosen experts' logits sums to one
  m.embedding_multiplier = cfg.doubleOr("embedding_multiplier", 1.0);
  m.residual_multiplier = cfg.doubleOr("residual_multiplier", 1.0);
  m.logits_scaling = cfg.doubleOr("logits_scaling", 1.0);
  // Granite's softmax scale is attention_multiplier itself, not 1/sqrt(head_dim).
  m.attention_scale = cfg.doubleOr("attention_multiplier", 1.0);
  if (m.logits_scaling == 0)
    throw Error(fmt::format("{}: 'logits_scaling' is 0, expected a non-zero number", cfg.where()));
}

void readGptOss(const ConfigReader& cfg, ModelConfig& m) {
  m.moe_intermediate = cfg.need("intermediate_size", m.model_type);
  m.scoring = RouterScoring::TopKSoftmax;
  m.norm_topk_prob = true;
  m.attention_sinks = true;
  m.activation = ExpertActivation::ClampedSwiGLU;
  m.gate_up_interleaved = true;
  // HF's GptOssExperts hard-codes alpha 1.702 and limit 7.0 (config.json's swiglu_limit is not read).
  m.glu_alpha = 1.702;
  m.glu_limit = 7.0;
  // layer_types default as GptOssConfig: sliding on even layers, full on odd ones.
  std::vector<std::string> types;
  for (int l = 0; l < m.layers; ++l) types.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
  types = cfg.optStringList("layer_types").value_or(types);
  requireLength(types, m.layers, "layer_types", cfg.where());
  const int window = std::max(0, cfg.intOr("sliding_window", 0));  // null or 0: no window
  for (int l = 0; l < m.layers; ++l) {
    if (types[l] == "sliding_attention")
      m.layer_attention[l].sliding_window = window;
    else if (types[l] != "full_attention")
      throw Error(fmt::format("{}: layer_types[{}] is '{}', expected sliding_attention or full_attention",
                              cfg.where(), l, types[l]));
  }
}

void readLlama4(const ConfigReader& cfg, ModelConfig& m) {
  m.moe_intermediate = cfg.need("intermediate_size", m.model_type);
  m.scoring = RouterScoring::TopKSigmoid;
  m.norm_topk_prob = false;
  m.weight_on_input = true;
  m.rope.interleaved = true;  // HF rotates complex pairs (2i, 2i+1)
  m.dense_module = "feed_forward";
  m.shared_intermediate = m.moe_intermediate;
  m.shared_module = "shared_expert";
  // Defaults as Llama4TextConfig.__post_init__: no_rope_layers[l] = 1 (RoPE) except every
  // no_rope_layer_interval-th layer; MoE every interleave_moe_layer_step-th layer; chunked attention on
  // RoPE layers, full attention on NoPE layers.
  const int interval = cfg.positiveOr("no_rope_layer_interval", 4);
  std::vector<int> use_rope;
  for (int l = 0; l < m.layers; ++l) use_rope.push_back((l + 1) % interval != 0 ? 1 : 0);
  if (auto v = cfg.optIntList("no_rope_layers"); v && !v->empty())
    use_rope = *v;  // HF: `x if x else default`
  requireLength(use_rope, m.layers, "no_rope_layers", cfg.where());
  const int step = cfg.positiveOr("interleave_moe_layer_step", 1);
  std::vector<int> moe_layers;
  for (int l = step - 1; l < m.layers; l += step) moe_layers.push_back(l);
  moe_layers = cfg.optIntList("moe_layers").value_or(moe_layers);
  for (int l = 0; l < m.layers; ++l)
    m.moe_layer[l] = std::find(moe_layers.begin(), moe_layers.end(), l) != moe_layers.end();
  if (std::find(m.moe_layer.begin(), m.moe_layer.end(), false) != m.moe_layer.end())
    m.dense_intermediate = cfg.need("intermediate_size_mlp", m.model_type);
  std::vector<std::string> types;
  for (int l = 0; l < m.layers; ++l) types.push_back(use_rope[l] ? "chunked_attention" : "full_attention");
  types = cfg.optStringList("layer_types").value_or(types);
  requireLength(types, m.layers, "layer_types", cfg.where());
  const int chunk = std::max(0, cfg.intOr("attention_chunk_size", 0));  // null or 0: no chunks
  for (int l = 0; l < m.layers; ++l) {
    m.layer_attention[l].rope = use_rope[l] != 0;
    if (types[l] == "chunked_attention")
      m.layer_attention[l].chunk = chunk;
    else if (types[l] != "full_attention")
      throw Error(fmt::format("{}: layer_types[{}] is '{}', expected chunked_attention or full_attention",
                              cfg.where(), l, types[l]));
  }
  if (cfg.boolOr("use_qk_norm", true)) m.qk_norm = ModelConfig::QkNorm::L2AfterRope;
  m.temperature_tuning = cfg.boolOr("attn_temperature_tuning", true);
  m.floor_scale = cfg.doubleOr("floor_scale", 8192);
  m.attn_scale = cfg.doubleOr("attn_scale", 0.1);
  if (m.floor_scale == 0)
    throw Error(fmt::format("{}: 'floor_scale' is 0, expected a non-zero number", cfg.where()));
}

// Names of the MoE tensors, found on the first MoE layer.
void detectMoeTensors(const Checkpoint& ckpt, ModelConfig& m, int first_moe) {
  const std::string& t = m.model_type;
  const std::string p = fmt::format("model.layers.{}.", first_moe);
  for (const char* module : {"block_sparse_moe", "mlp", "feed_forward"})
    for (const char* router : {"gate", "router", "router.layer"})
      if (m.moe_module.empty() && has(ckpt, p + module + "." + router + ".weight"))
        m.moe_module = module, m.router_module = router;
  if (m.moe_module.empty())
    throw Error(fmt::format(
        "{}: router tensor {}{{block_sparse_moe,mlp,feed_forward}}.{{gate,router,router.layer}}.weight not "
        "found ({})",
        ckpt.root(), p, t));
  const std::string mp = p + m.moe_module + ".";
  m.router_bias = has(ckpt, mp + m.router_module + ".bias");
  const std::string e0 = mp + "experts.0.";
  const bool fused_family = t == "gpt_oss" || t == "llama4_text" || t == "granitemoe";
  if (has(ckpt, e0 + "w1.weight")) {
    m.expert_gate = "w1", m.expert_up = "w3", m.expert_down = "w2";
  } else if (has(ckpt, e0 + "gate_proj.weight")) {
    m.expert_gate = "gate_proj", m.expert_up = "up_proj", m.expert_down = "down_proj";
  } else if (fused_family && has(ckpt, mp + "experts.gate_up_proj") && has(ckpt, mp + "experts.down_proj")) {
    m.fused_experts = true, m.fused_gate_up = "experts.gate_up_proj", m.fused_down = "experts.down_proj";
  } else if (fused_family && has(ckpt, mp + "input_linear.weight") &&
             has(ckpt, mp + "output_linear.weight")) {
    m.fused_experts = true, m.fused_gate_up = "input_linear.weight", m.fused_down = "output_linear.weight";
  } else if (has(ckpt, mp + "experts.gate_up_proj")) {
    // The fused layout of this family (gate/up halves or interleaved, [in, out] or [out, in]) is not
    // verified against HF, so it is refused rather than guessed.
    throw Error(
        fmt::format("{}: fused 3-D expert tensors ({}experts.gate_up_proj) in a {} checkpoint are not "
                    "supported by the engine (they are for gpt_oss, llama4_text and granitemoe)",
                    ckpt.root(), mp, t));
  } else {
    throw Error(fmt::format(
        "{}: expert tensors {}{{w1,gate_proj}}.weight or fused {}experts.gate_up_proj not found ({})",
        ckpt.root(), e0, mp, t));
  }
  if (m.fused_experts) {
    for (const std::string& name : {m.fused_gate_up, m.fused_down}) {
      const TensorRecord& rec = ckpt.tensor(*ckpt.find(mp + name));
      if (rec.shape.size() != 3 || rec.shape[0] != m.num_experts)
        throw Error(
            fmt::format("{}: fused expert tensor '{}{}' has shape [{}], expected [{}, ., .] (one slice per "
                        "expert)",
                        ckpt.root(), mp, name, fmt::join(rec.shape, ", "), m.num_experts));
    }
    if (t == "gpt_oss") {
      auto bias = [](const std::string& n) { return n + "_bias"; };
      m.expert_bias = has(ckpt, mp + bias(m.fused_gate_up)) && has(ckpt, mp + bias(m.fused_down));
    }
  }
  if (m.shared_intermediate > 0 && !has(ckpt, mp + m.shared_module + ".gate_proj.weight"))
    m.shared_intermediate = 0;  // config names shared experts the checkpoint does not have
  if (m.shared_expert_gate && !has(ckpt, mp + "shared_expert_gate.weight")) m.shared_expert_gate = false;
  if (m.scoring == RouterScoring::SigmoidBiasedTopK && !has(ckpt, mp + "gate.e_score_correction_bias"))
    throw Error(fmt::format("{}: {}gate.e_score_correction_bias is missing (noaux_tc routing needs it)",
                            ckpt.root(), mp));
}

}  // namespace

int ModelConfig::numMoeLayers() const {
  return static_cast<int>(std::count(moe_layer.begin(), moe_layer.end(), true));
}

int ModelConfig::moeIndex(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(moe_layer.size()) || !moe_layer[layer]) return -1;
  return static_cast<int>(std::count(moe_layer.begin(), moe_layer.begin() + layer, true));
}

std::string ModelConfig::describe() const {
  return fmt::format(
      "{}: {} layers ({} MoE), hidden {}, {} heads / {} KV heads (head dim {}){}, {} experts top-{}{}, "
      "vocab {}, RoPE {} theta {}",
      model_type, layers, numMoeLayers(), hidden, heads, kv_heads, head_dim, mla ? ", MLA" : "", num_experts,
      top_k, shared_intermediate > 0 ? " + shared expert" : "", vocab, rope.type, rope.theta);
}

// num_hidden_layers sizes per-layer tables before any tensor is read: checked against the tensors present
// (a config saying 1000000000 layers grew to 14.6 GB). Every layer's tensors are looked up later by name,
// so the last layer's prefix must exist; the message says which layers the checkpoint holds.
void checkLayerCount(const Checkpoint& ckpt, int layers, const std::string& where) {
  const std::string last = fmt::format("model.layers.{}.", layers - 1);
  int64_t highest = -1;
  for (const TensorRecord& t : ckpt.tensors()) {
    if (t.name.starts_with(last)) return;
    if (!t.name.starts_with("model.layers.")) continue;
    const char* digits = t.name.c_str() + std::string_view("model.layers.").size();
    int64_t layer = 0;
    int n = 0;
    for (; n < 10 && digits[n] >= '0' && digits[n] <= '9'; ++n) layer = layer * 10 + (digits[n] - '0');
    if (n > 0) highest = std::max(highest, layer);
  }
  throw Error(fmt::format("{}: 'num_hidden_layers' is {}, but the checkpoint has no tensor of layer {} ({}*); "
                          "it holds {}",
                          where, layers, layers - 1, last,
                          highest < 0 ? std::string("no model.layers.* tensors")
                                      : fmt::format("layers 0..{}", highest)));
}

// Sizes the engine allocates per layer before reading a tensor come from config.json; each product below is
// the element count of weights a model of that config must hold, so a config claiming more than the whole
// checkpoint holds does not belong to these weights (hidden_size 100000000 reached bad_alloc). A loose bound,
// exact shapes are checked when the tensors are read.
void checkSizesAgainstWeights(const Checkpoint& ckpt, const ModelConfig& m, const std::string& where) {
  double held = 0;
  for (const TensorRecord& t : ckpt.tensors()) held += double(t.numel());
  auto check = [&](double claimed, const std::string& what) {
    if (claimed > held)
      throw Error(fmt::format("{}: {} is {:.3g} weights, but the checkpoint holds {:.3g} in all: a config that "
                              "does not belong to these weights",
                              where, what, claimed, held));
  };
  check(double(m.vocab) * m.hidden, fmt::format("vocab_size {} x hidden_size {} (the embeddings)", m.vocab, m.hidden));
  if (!m.mla)
    check(double(m.heads) * m.head_dim * m.hidden,
          fmt::format("num_attention_heads {} x head dim {} x hidden_size {} (a query projection)", m.heads,
                      m.head_dim, m.hidden));
  check(double(m.num_experts) * m.moe_intermediate * m.hidden,
        fmt::format("{} experts x expert intermediate size {} x hidden_size {} (one MoE layer's experts)",
                    m.num_experts, m.moe_intermediate, m.hidden));
  check(double(m.dense_intermediate) * m.hidden,
        fmt::format("dense intermediate size {} x hidden_size {} (a dense MLP)", m.dense_intermediate, m.hidden));
  check(double(m.shared_intermediate) * m.hidden,
        fmt::format("shared-expert intermediate size {} x hidden_size {}", m.shared_intermediate, m.hidden));
}

ModelConfig parseModelConfig(const Checkpoint& ckpt) {
  const json& c = ckpt.config();
  const std::string where = ckpt.root() + "/config.json";
  const ConfigReader cfg(c, where);
  ModelConfig m;
  m.model_type = cfg.stringOr("model_type", "");
  const std::string& t = m.model_type;
  static const std::vector<std::string> supported = {"mixtral",    "qwen2_moe",   "qwen3_moe",
                                                     "olmoe",      "deepseek_v2", "deepseek_v3",
                                                     "granitemoe", "gpt_oss",     "llama4_text"};
  if (std::find(supported.begin(), supported.end(), t) == supported.end())
    throw Error(
        fmt::format("{}: model_type '{}' is not supported by the inference engine: {} (supported: {})", where,
                    t, refusalReason(t), kSupported));
  m.hidden = cfg.need("hidden_size", t);
  m.layers = cfg.need("num_hidden_layers", t);
  checkLayerCount(ckpt, m.layers, where);
  m.heads = cfg.need("num_attention_heads", t);
  m.kv_heads = cfg.positiveOr("num_key_value_heads", m.heads);
  m.head_dim = cfg.positiveOr("head_dim", m.hidden / m.heads);
  m.vocab = cfg.need("vocab_size", t);
  m.norm_eps = cfg.doubleOr("rms_norm_eps", 1e-6);
  // A negative epsilon makes 1/sqrt(mean + eps) NaN for small rows: ppl -nan with exit 0.
  if (!(m.norm_eps >= 0.0) || !std::isfinite(m.norm_eps))
    throw Error(fmt::format("{}: 'rms_norm_eps' is {}, expected a small non-negative number (e.g. 1e-6)", where,
                            m.norm_eps));
  m.tie_embeddings = cfg.boolOr("tie_word_embeddings", false);
  const bool untied_by_config = c.contains("tie_word_embeddings") && c["tie_word_embeddings"].is_boolean() &&
                                !c["tie_word_embeddings"].get<bool>();
  m.bos_token_id = optionalId(c, "bos_token_id", where);
  m.eos_token_id = optionalId(c, "eos_token_id", where);
  m.rope = readRope(cfg, c);
  m.rope.rotary_dim = static_cast<int>(m.head_dim * cfg.doubleOr("partial_rotary_factor", 1.0));
  if (m.head_dim <= 0 || m.rope.rotary_dim < 0 || m.rope.rotary_dim > m.head_dim)
    throw Error(
        fmt::format("{}: head dim {} (hidden_size / num_attention_heads or head_dim) with "
                    "partial_rotary_factor gives {} rotated dims, expected 0..head dim",
                    where, m.head_dim, m.rope.rotary_dim));
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0)
    throw Error(fmt::format(
        "{}: num_attention_heads {} is not a multiple of num_key_value_heads {} ({}): grouped-query "
        "attention needs each KV head shared by a whole number of query heads",
        where, m.heads, m.kv_heads, t));

  m.num_experts = cfg.intOr("num_local_experts", cfg.intOr("num_experts", cfg.intOr("n_routed_experts", 0)));
  m.top_k = cfg.need("num_experts_per_tok", t);
  if (m.num_experts <= 0)
    throw Error(
        fmt::format("{}: no expert count (num_local_experts / num_experts / n_routed_experts: a positive "
                    "integer expected) ({})",
                    where, t));
  m.moe_layer.assign(m.layers, true);
  m.layer_attention.assign(m.layers, LayerAttention{});
  m.attention_scale = 1.0 / std::sqrt(static_cast<double>(m.head_dim));

  if (t == "mixtral")
    readMixtral(cfg, m);
  else if (t == "qwen2_moe" || t == "qwen3_moe")
    readQwen(cfg, m);
  else if (t == "olmoe")
    readOlmoe(cfg, m);
  else if (t == "deepseek_v2" || t == "deepseek_v3")
    readDeepseek(cfg, m);
  else if (t == "granitemoe")
    readGranite(cfg, m);
  else if (t == "gpt_oss")
    readGptOss(cfg, m);
  else
    readLlama4(cfg, m);
  if (m.top_k > m.num_experts)
    throw Error(
        fmt::format("{}: num_experts_per_tok {} must be in 1..{} ({})", where, m.top_k, m.num_experts, t));
  if (m.n_group > 0 && (m.num_experts % m.n_group != 0 || m.topk_group > m.n_group))
    throw Error(fmt::format("{}: n_group {} / topk_group {} do not divide {} experts ({})", where, m.n_group,
                            m.topk_group, m.num_experts, t));
  checkSizesAgainstWeights(ckpt, m, where);
  for (int l = 0; l < m.layers; ++l)
    if (!m.moe_layer[l] && m.dense_intermediate <= 0)
      throw Error(fmt::format("{}: layer {} is dense but the config gives no intermediate size for it ({})",
                              where, l, t));

  // Tensor naming, checked on the first MoE layer and the first layer's attention.
  const int first_moe =
      static_cast<int>(std::find(m.moe_layer.begin(), m.moe_layer.end(), true) - m.moe_layer.begin());
  if (first_moe < m.layers) detectMoeTensors(ckpt, m, first_moe);
  if (!m.mla) {
    m.qkv_bias = has(ckpt, "model.layers.0.self_attn.q_proj.bias");
    m.o_bias = has(ckpt, "model.layers.0.self_attn.o_proj.bias");
  }
  if (m.attention_sinks && !has(ckpt, "model.layers.0.self_attn.sinks"))
    throw Error(fmt::format("{}: model.layers.0.self_attn.sinks is missing ({} needs attention sinks)",
                            ckpt.root(), t));
  if (!has(ckpt, "lm_head.weight")) {
    // Evaluating with the embeddings in its place gave ppl 3134 instead of 30.7 without a word.
    if (untied_by_config)
      throw Error(fmt::format("{}: lm_head.weight is missing, and config.json says tie_word_embeddings: false "
                              "(the output projection is its own tensor): an incomplete checkpoint?",
                              ckpt.root()));
    if (!has(ckpt, "model.embed_tokens.weight"))
      throw Error(fmt::format("{}: neither lm_head.weight nor model.embed_tokens.weight found", ckpt.root()));
    m.tie_embeddings = true;
  }
  if (m.tie_embeddings) m.lm_head = "model.embed_tokens.weight";
  return m;
}

}  // namespace moewb::engine

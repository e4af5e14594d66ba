// SPDX-License-Identifier: MIT
// Classifies every tensor of a checkpoint by structure: where the layer container is, which modules are
// attention / MLP / experts / routers, whether a 3-D tensor fuses the experts of a layer. Model types are
// used only for the display name, so new MoE families with HF-style names work without code changes.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "catalog_names.h"
#include "moewb/catalog.h"
#include "moewb/error.h"

namespace moewb {

using detail::NameParts;

std::string_view blockName(Block b) {
  switch (b) {
    case Block::Attention: return "attention";
    case Block::MlpDense: return "mlp_dense";
    case Block::Expert: return "expert";
    case Block::SharedExpert: return "shared_expert";
    case Block::Router: return "router";
    case Block::Embedding: return "embedding";
    case Block::LmHead: return "lm_head";
    case Block::Norm: return "norm";
    case Block::Other: return "other";
  }
  return "other";
}

std::optional<Block> parseBlock(std::string_view s) {
  for (Block b : {Block::Attention, Block::MlpDense, Block::Expert, Block::SharedExpert, Block::Router, Block::Embedding,
                  Block::LmHead, Block::Norm, Block::Other})
    if (blockName(b) == s) return b;
  if (s == "dense" || s == "mlp") return Block::MlpDense;
  if (s == "shared") return Block::SharedExpert;
  if (s == "attn") return Block::Attention;
  return std::nullopt;
}

std::string_view projName(Proj p) {
  switch (p) {
    case Proj::None: return "";
    case Proj::Q: return "q";
    case Proj::K: return "k";
    case Proj::V: return "v";
    case Proj::O: return "o";
    case Proj::QKV: return "qkv";
    case Proj::QA: return "q_a";
    case Proj::QB: return "q_b";
    case Proj::KVA: return "kv_a";
    case Proj::KVB: return "kv_b";
    case Proj::Gate: return "gate";
    case Proj::Up: return "up";
    case Proj::Down: return "down";
    case Proj::GateUp: return "gate_up";
    case Proj::RouterWeight: return "router";
    case Proj::SharedGate: return "shared_gate";
    case Proj::Bias: return "bias";
    case Proj::Norm: return "norm";
    case Proj::Other: return "other";
  }
  return "";
}

std::string_view mlpKindName(MlpKind k) {
  switch (k) {
    case MlpKind::None: return "none";
    case MlpKind::Dense: return "dense";
    case MlpKind::Moe: return "moe";
  }
  return "none";
}

namespace {

int64_t configInt(const nlohmann::json& c, std::initializer_list<const char*> keys, int64_t fallback = 0) {
  for (const char* k : keys) {
    auto it = c.find(k);
    if (it != c.end() && it->is_number_integer()) return it->get<int64_t>();
  }
  // Multimodal configs nest the language model's settings.
  for (const char* sub : {"text_config", "language_config", "llm_config"}) {
    auto it = c.find(sub);
    if (it != c.end() && it->is_object()) {
      auto v = configInt(*it, keys, -1);
      if (v >= 0) return v;
    }
  }
  return fallback;
}

std::string configString(const nlohmann::json& c, const char* key) {
  auto it = c.find(key);
  return it != c.end() && it->is_string() ? it->get<std::string>() : std::string{};
}

std::string familyName(const std::string& model_type) {
  static const std::map<std::string, std::string> names = {
      {"mixtral", "Mixtral"},          {"qwen2_moe", "Qwen2-MoE"},       {"qwen3_moe", "Qwen3-MoE"},
      {"olmoe", "OLMoE"},              {"deepseek_v2", "DeepSeek-V2"},   {"deepseek_v3", "DeepSeek-V3"},
      {"switch_transformers", "Switch Transformers"}, {"granitemoe", "GraniteMoE"}, {"gpt_oss", "gpt-oss"},
      {"llama4_text", "Llama 4"},      {"llama4", "Llama 4"},            {"phimoe", "PhiMoE"},
      {"jamba", "Jamba"},              {"dbrx", "DBRX"},                 {"minimax", "MiniMax"},
      {"glm4_moe", "GLM-4-MoE"},       {"ernie4_5_moe", "ERNIE-4.5-MoE"}, {"hunyuan_v1_moe", "Hunyuan-MoE"},
      {"granitemoeshared", "GraniteMoE-Shared"}, {"qwen3_next", "Qwen3-Next"}, {"deepseek", "DeepSeek-MoE"},
  };
  auto it = names.find(model_type);
  return it != names.end() ? it->second : (model_type.empty() ? "unknown" : model_type);
}

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

ModelCatalog::ModelCatalog(std::shared_ptr<const Checkpoint> ckpt, const ProgressFn& progress)
    : ckpt_(std::move(ckpt)) {
  const auto& cfg = ckpt_->config();
  model_type_ = configString(cfg, "model_type");
  family_ = familyName(model_type_);
  auto check = [&progress](double fraction) {
    if (progress && !progress(fraction, "classifying tensors")) throw Cancelled{};
  };
  check(0.0);
  classifyAll(check);
  buildLayers();
  check(0.9);
  buildMatrices();
  check(1.0);
}

void ModelCatalog::classifyAll(const std::function<void(double)>& check) {
  // Polled every this many tensors: often enough to stop promptly, rarely enough to cost nothing.
  constexpr std::size_t kCheckEvery = 4096;
  const auto& cfg = ckpt_->config();
  const auto& tensors = ckpt_->tensors();
  const int64_t hidden = configInt(cfg, {"hidden_size", "d_model", "n_embd", "dim"});
  const int64_t config_experts = configInt(cfg, {"num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts",
                                                 "num_experts_per_layer", "n_experts"});
  classes_.assign(tensors.size(), {});

  // Global layer numbering: stacks (encoder, decoder, ...) in order of first appearance, sorted so that
  // an "encoder" stack precedes a "decoder" one.
  std::vector<NameParts> parsed(tensors.size());
  std::map<std::string, int> stack_layers;  // stack -> number of layers
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (i % kCheckEvery == 0) check(0.4 * double(i) / double(tensors.size()));
    parsed[i] = detail::splitName(tensors[i].name);
    if (parsed[i].local_layer >= 0)
      stack_layers[parsed[i].stack] = std::max(stack_layers[parsed[i].stack], parsed[i].local_layer + 1);
  }
  std::vector<std::string> stacks;
  for (const auto& [s, n] : stack_layers) stacks.push_back(s);
  std::stable_sort(stacks.begin(), stacks.end(), [](const std::string& a, const std::string& b) {
    auto rank = [](const std::string& s) {
      if (s.find("encoder") != std::string::npos) return 0;
      if (s.find("decoder") != std::string::npos) return 2;
      if (s.find("vision") != std::string::npos || s.find("visual") != std::string::npos) return 3;
      return 1;
    };
    return rank(a) < rank(b);
  });
  std::map<std::string, int> stack_offset;
  int offset = 0;
  for (const auto& s : stacks) {
    stack_offset[s] = offset;
    offset += stack_layers[s];
  }
  stack_names_.clear();
  for (const auto& s : stacks) stack_names_.emplace_back(s, stack_layers[s]);

  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (i % kCheckEvery == 0) check(0.4 + 0.5 * double(i) / double(tensors.size()));
    const auto& t = tensors[i];
    const auto& n = parsed[i];
    TensorClass& c = classes_[i];
    if (n.local_layer >= 0) c.layer = stack_offset[n.stack] + n.local_layer;
    c.expert = n.expert;
    c.is_bias = n.param == "bias" || endsWith(n.param, "_bias");
    const bool is_scale = n.param == "weight_scale_inv" || n.param == "weight_scale" || n.param == "input_scale";

    const bool shared = detail::hasComponentContaining(n, "shared_expert") || detail::hasComponentContaining(n, "shared_mlp") ||
                        detail::hasComponent(n, {"shared_experts", "shared_expert"});
    const bool routerish = detail::hasComponent(n, {"gate", "router", "classifier", "switch_gate"}) ||
                           detail::hasComponentContaining(n, "router") || n.module == "gate" ||
                           n.param == "e_score_correction_bias";
    const bool expertish = n.expert >= 0 || detail::hasComponentContaining(n, "experts") ||
                           detail::hasComponent(n, {"block_sparse_moe", "moe", "sparse_moe"});
    const bool attention = detail::hasComponentContaining(n, "attn") || detail::hasComponentContaining(n, "attention") ||
                           detail::hasComponentContaining(n, "Attention") || detail::hasComponent(n, {"mixer_attn"});
    const bool mlpish = detail::hasComponent(n, {"mlp", "feed_forward", "ffn", "DenseReluDense", "block_sparse_moe", "moe"}) ||
                        detail::hasComponentContaining(n, "mlp");
    const std::string lower_module = n.module;
    const bool norm = lower_module.find("norm") != std::string::npos || lower_module.find("ln_") == 0 ||
                      lower_module == "ln" || lower_module.find("layernorm") != std::string::npos;

    if (n.local_layer < 0) {
      // Top-level tensors: embeddings, final norm, output head.
      if (norm) c.block = Block::Norm, c.proj = Proj::Norm;
      else if (t.name.find("lm_head") != std::string::npos || t.name.find("embed_out") != std::string::npos ||
               t.name == "output.weight")
        c.block = Block::LmHead;
      else if (t.name.find("embed") != std::string::npos || t.name.find("wte") != std::string::npos ||
               t.name == "shared.weight" || t.name.find("tok_embeddings") != std::string::npos)
        c.block = Block::Embedding;
      continue;
    }
    if (norm && t.shape.size() <= 1) {
      c.block = Block::Norm;
      c.proj = Proj::Norm;
      continue;
    }
    if (shared) {
      c.block = Block::SharedExpert;
      const bool shared_gate = n.module.find("shared_expert_gate") != std::string::npos ||
                               n.module.find("shared_gate") != std::string::npos;
      c.proj = shared_gate ? Proj::SharedGate : detail::projFromModule(n.module, true);
      c.expert = -1;
    } else if (routerish && n.expert < 0 && (mlpish || expertish) &&
               detail::projFromModule(n.module, true) != Proj::Gate) {
      c.block = Block::Router;
      c.proj = Proj::RouterWeight;
    } else if (expertish && (n.expert >= 0 || t.shape.size() >= 3 ||
                             (c.is_bias && t.shape.size() == 2 && config_experts > 0 && t.shape[0] == config_experts))) {
      c.block = Block::Expert;
      c.proj = detail::projFromModule(n.module, true);
      if (n.expert < 0 && !t.shape.empty()) c.experts_in_tensor = static_cast<int>(t.shape[0]);
    } else if (attention) {
      c.block = Block::Attention;
      c.proj = detail::projFromModule(n.module, false);
    } else if (mlpish) {
      c.block = Block::MlpDense;
      c.proj = detail::projFromModule(n.module, true);
    }
    if (c.block == Block::Attention && n.param == "sinks") c.proj = Proj::Other;
    if (c.is_bias && c.proj == Proj::Other) c.proj = Proj::Bias;
    if (is_scale) {
      c.is_scale = true;
      c.proj = Proj::Other;
    }

    // Fused 3-D expert tensors [E, a, b]: decide whether each slice is [out, in] (F.linear) or [in, out]
    // (x @ W). The hidden size tells where it can; otherwise bare parameters (no ".weight") are x @ W.
    if (c.experts_in_tensor > 0 && t.shape.size() == 3 && !c.is_bias) {
      const int64_t a = t.shape[1], b = t.shape[2];
      const bool bare = n.param != "weight";
      bool input_major = bare;
      if (c.proj == Proj::Down) {
        if (b == hidden && a != hidden) input_major = true;
        else if (a == hidden && b != hidden) input_major = false;
      } else if (hidden > 0) {
        if (a == hidden && b != hidden) input_major = true;
        else if (b == hidden && a != hidden) input_major = false;
      }
      c.input_major = input_major;
    }
  }
}

void ModelCatalog::buildLayers() {
  const auto& cfg = ckpt_->config();
  const auto& tensors = ckpt_->tensors();
  int num_layers = 0;
  for (const auto& c : classes_) num_layers = std::max(num_layers, c.layer + 1);
  layers_.assign(num_layers, {});
  std::vector<std::set<int>> expert_ids(num_layers);
  std::vector<int> fused_experts(num_layers, 0);
  std::vector<bool> has_dense(num_layers, false), has_shared(num_layers, false);
  for (std::size_t i = 0; i < classes_.size(); ++i) {
    const auto& c = classes_[i];
    if (c.layer < 0) continue;
    if (c.block == Block::Expert) {
      if (c.expert >= 0) expert_ids[c.layer].insert(c.expert);
      if (c.experts_in_tensor > 0) fused_experts[c.layer] = std::max(fused_experts[c.layer], c.experts_in_tensor);
    } else if (c.block == Block::MlpDense) {
      has_dense[c.layer] = true;
    } else if (c.block == Block::SharedExpert) {
      has_shared[c.layer] = true;
    }
    (void)tensors;
  }
  const int64_t top_k = configInt(cfg, {"num_experts_per_tok", "moe_topk", "top_k", "num_selected_experts",
                                        "moe_k", "experts_per_token", "router_top_k"});
  const int64_t shared_count = configInt(cfg, {"n_shared_experts", "num_shared_experts", "moe_num_shared_experts"}, -1);
  int global = 0;
  for (const auto& [stack, count] : stack_names_) {
    for (int local = 0; local < count; ++local, ++global) {
      LayerInfo& L = layers_[global];
      L.index = global;
      L.stack = stack_names_.size() > 1 ? stack : "";
      L.num_experts = std::max<int>(static_cast<int>(expert_ids[global].size()), fused_experts[global]);
      if (L.num_experts > 0) {
        L.mlp = MlpKind::Moe;
        // Switch Transformers route each token to one expert and has no top-k key.
        L.top_k = top_k > 0 ? static_cast<int>(top_k) : 1;
      } else if (has_dense[global]) {
        L.mlp = MlpKind::Dense;
      }
      if (has_shared[global]) L.num_shared_experts = shared_count > 0 ? static_cast<int>(shared_count) : 1;
    }
  }
}

void ModelCatalog::buildMatrices() {
  const auto& tensors = ckpt_->tensors();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const auto& c = classes_[i];
    if (c.is_bias || c.is_scale || c.block == Block::Norm || !isFloatingPoint(t.dtype)) continue;
    if (endsWith(t.name, ".sinks")) continue;
    if (t.shape.size() == 2) {
      matrices_.push_back({i, -1, t.shape[0], t.shape[1], t.name});
    } else if (t.shape.size() == 3 && c.experts_in_tensor > 0) {
      for (int e = 0; e < c.experts_in_tensor; ++e) {
        const int64_t rows = c.input_major ? t.shape[2] : t.shape[1];
        const int64_t cols = c.input_major ? t.shape[1] : t.shape[2];
        matrices_.push_back({i, e, rows, cols, t.name + "[" + std::to_string(e) + "]"});
      }
    }
  }
}

std::vector<std::string> ModelCatalog::unclassified() const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < classes_.size(); ++i)
    if (classes_[i].block == Block::Other) out.push_back(ckpt_->tensors()[i].name);
  return out;
}

int64_t ModelCatalog::paramsTotal() const {
  int64_t total = 0;
  for (const auto& t : ckpt_->tensors())
    if (!endsWith(t.name, "_scale_inv")) total += t.numel();
  return total;
}

std::map<std::string, int64_t> ModelCatalog::paramsByBlock() const {
  std::map<std::string, int64_t> out;
  const auto& tensors = ckpt_->tensors();
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (!endsWith(tensors[i].name, "_scale_inv")) out[std::string(blockName(classes_[i].block))] += tensors[i].numel();
  return out;
}

std::map<std::string, uint64_t> ModelCatalog::bytesByDtype() const {
  std::map<std::string, uint64_t> out;
  for (const auto& t : ckpt_->tensors()) out[std::string(dtypeName(t.dtype))] += t.nbytes;
  return out;
}

ModelCatalog::RawView ModelCatalog::rawView(const WeightMatrix& m) const {
  const auto& t = ckpt_->tensor(m.tensor);
  const auto& c = classes_.at(m.tensor);
  auto bytes = ckpt_->bytes(m.tensor);
  const std::size_t esize = dtypeSize(t.dtype);
  if (m.slice < 0) return {bytes.data(), t.dtype, t.shape[0], t.shape[1], t.shape[1], 1};
  const int64_t a = t.shape[1], b = t.shape[2];
  const std::byte* base = bytes.data() + static_cast<std::size_t>(m.slice) * a * b * esize;
  if (c.input_major) return {base, t.dtype, b, a, 1, b};
  return {base, t.dtype, a, b, b, 1};
}

MatrixRM ModelCatalog::readMatrix(const WeightMatrix& m) const {
  const auto& t = ckpt_->tensor(m.tensor);
  if (m.slice < 0) {
    auto values = ckpt_->readFloat(m.tensor);  // handles FP8 block scales
    return Eigen::Map<MatrixRM>(values.data(), t.shape[0], t.shape[1]);
  }
  auto v = rawView(m);
  MatrixRM out(v.rows, v.cols);
  const std::size_t esize = dtypeSize(v.dtype);
  for (int64_t r = 0; r < v.rows; ++r)
    convertToFloatStrided(v.dtype, v.data + r * v.row_stride * esize, static_cast<std::size_t>(v.cols),
                          static_cast<std::size_t>(v.col_stride), out.row(r).data());
  return out;
}

}  // namespace moewb

// SPDX-License-Identifier: MIT
// The zoo's random-initialised checkpoints have no reference outputs, so the engine is checked against
// invariants every correct implementation satisfies: causality (a prefix gives the prefix's logits, the
// equivalent of incremental decoding), batch independence, invariance under a permutation of the experts,
// routing weights that sum to one where the family normalises them, and weight replacement. Families the
// engine does not run must be refused with a message naming model_type.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numeric>
#include <random>
#include <regex>

#include "moewb/engine/engine.h"
#include "moewb/engine/weight_provider.h"
#include "moewb/error.h"
#include "moewb/safetensors_writer.h"
#include "test_support.h"
#include "zoo_models.h"

namespace moewb::engine {
namespace {

std::filesystem::path zoo(const std::string& name) {
  return test::zooModel(name);
}

std::vector<int32_t> randomIds(int n, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& i : ids) i = d(rng);
  return ids;
}

double maxAbsDiff(const MatrixRM& a, const MatrixRM& b) {
  return (a - b).cwiseAbs().maxCoeff();
}
double tolerance(const MatrixRM& ref) {
  return 1e-5 * std::max(1.0, static_cast<double>(ref.cwiseAbs().maxCoeff()));
}

// Presents the experts of every MoE layer in another order: expert e of the wrapped model is expert
// perm[e] of the checkpoint (per-expert modules "experts.<e>." and fused slices "[<e>]"), and router
// rows, router biases, DeepSeek-V3 score biases and fused expert biases ([E, n]) are permuted alike.
class PermutedExperts final : public WeightProvider {
 public:
  PermutedExperts(std::shared_ptr<const WeightProvider> base, std::vector<int> perm)
      : base_(std::move(base)), perm_(std::move(perm)) {}
  bool contains(const std::string& n) const override { return base_->contains(map(n)); }
  MatrixRM matrix(const std::string& n, int64_t r, int64_t c) const override {
    MatrixRM m = base_->matrix(map(n), r, c);
    if (isRouter(n)) {
      MatrixRM p(m.rows(), m.cols());
      for (int e = 0; e < static_cast<int>(perm_.size()); ++e) p.row(e) = m.row(perm_[e]);
      return p;
    }
    return m;
  }
  std::vector<float> vector(const std::string& n, int64_t len) const override {
    auto v = base_->vector(map(n), len);
    const bool per_expert = n.find("e_score_correction_bias") != std::string::npos ||
                            std::regex_search(n, std::regex(R"((\.router\.bias|\.experts\.[a-z_]+_bias)$)"));
    if (!per_expert) return v;
    const std::size_t block = v.size() / perm_.size();  // one row of [E, n] per expert
    std::vector<float> p(v.size());
    for (std::size_t e = 0; e < perm_.size(); ++e)
      std::copy_n(v.begin() + perm_[e] * block, block, p.begin() + e * block);
    return p;
  }
  void embeddingRows(const std::string& n, std::span<const int32_t> ids, int64_t h,
                     float* out) const override {
    base_->embeddingRows(n, ids, h, out);
  }

 private:
  static bool isRouter(const std::string& n) {
    return std::regex_search(n, std::regex(R"(\.(gate|router|router\.layer)\.weight$)"));
  }
  std::string map(const std::string& n) const {
    static const std::regex expert(R"(\.experts\.(\d+)\.)"), slice(R"(\[(\d+)\]$)");
    std::smatch m;
    if (std::regex_search(n, m, expert))
      return m.prefix().str() + ".experts." + std::to_string(perm_[std::stoi(m[1])]) + "." + m.suffix().str();
    if (std::regex_search(n, m, slice))
      return m.prefix().str() + "[" + std::to_string(perm_[std::stoi(m[1])]) + "]";
    return n;
  }
  std::shared_ptr<const WeightProvider> base_;
  std::vector<int> perm_;
};

struct RoutingCheck : ForwardObserver {
  bool normalised = false;
  double worst = 0;
  int64_t calls = 0;
  int first_expert = -1;  // the first MoE layer's first choice for the first token
  bool wantsLogits() const override { return false; }
  void onRouting(const RoutingView& v) override {
    if (calls++ == 0) first_expert = v.experts[0];
    for (int64_t t = 0; t < v.tokens; ++t) {
      double s = 0;
      for (int j = 0; j < v.top_k; ++j) {
        s += v.weights[t * v.top_k + j];
        EXPECT_GE(v.experts[t * v.top_k + j], 0);
        EXPECT_LT(v.experts[t * v.top_k + j], v.num_experts);
      }
      worst = std::max(worst, normalised ? std::abs(s - 1.0) : std::max(0.0, s - 1.0 - 1e-6));
    }
  }
};

// The invariants every family satisfies, on the model in `dir`.
void expectInvariants(const std::filesystem::path& dir) {
  auto engine = MoeEngine::open(dir.string());
  const ModelConfig& c = engine->config();
  SCOPED_TRACE(c.describe());
  auto a = randomIds(24, c.vocab, 1), b = randomIds(17, c.vocab, 2);
  MatrixRM full = engine->logits(a);
  ASSERT_TRUE(full.allFinite());

  // Causality: the logits of a prefix are the prefix rows of the full sequence's logits.
  MatrixRM prefix = engine->logits(std::span<const int32_t>(a.data(), 9));
  EXPECT_LE(maxAbsDiff(prefix, full.topRows(9)), tolerance(full));

  // Batch independence: sequences packed together do not see each other.
  struct Collect : ForwardObserver {
    MatrixRM out;
    void onLogits(int64_t r0, int64_t rows, const float* l, int64_t v) override {
      out.middleRows(r0, rows) = Eigen::Map<const MatrixRM>(l, rows, v);
    }
  } both;
  SequenceBatch batch;
  batch.add(b);
  batch.add(a);
  both.out.resize(batch.tokens(), c.vocab);
  engine->forward(batch, both);
  EXPECT_LE(maxAbsDiff(both.out.bottomRows(a.size()), full), tolerance(full));
  EXPECT_LE(maxAbsDiff(both.out.topRows(b.size()), engine->logits(b)), tolerance(full));

  // Permuting the experts (and the router rows with them) changes nothing.
  std::vector<int> perm(c.num_experts);
  for (int e = 0; e < c.num_experts; ++e) perm[e] = (e * 3 + 1) % c.num_experts;
  if (std::gcd(3, c.num_experts) != 1) std::reverse(perm.begin(), perm.end());
  MoeEngine permuted(
      engine->checkpointPtr(),
      std::make_shared<PermutedExperts>(std::make_shared<CheckpointWeights>(engine->checkpointPtr()), perm));
  EXPECT_LE(maxAbsDiff(permuted.logits(a), full), tolerance(full));

  // Routing weights sum to one where the family renormalises the top-k (never more than one otherwise).
  RoutingCheck routing;
  routing.normalised = c.norm_topk_prob && c.routed_scaling == 1.0;
  SequenceBatch one;
  one.add(a);
  engine->forward(one, routing);
  EXPECT_EQ(routing.calls, c.numMoeLayers());
  EXPECT_LT(routing.worst, 1e-5);

  // Replacing a matrix by itself is invisible; replacing an expert that a token chose by zeros is not.
  const int first_moe =
      static_cast<int>(std::find(c.moe_layer.begin(), c.moe_layer.end(), true) - c.moe_layer.begin());
  const int e = routing.first_expert;
  ASSERT_GE(e, 0);
  const std::string down =
      c.fused_experts
          ? fmt::format("model.layers.{}.{}.{}[{}]", first_moe, c.moe_module, c.fused_down, e)
          : fmt::format("model.layers.{}.{}.experts.{}.{}.weight", first_moe, c.moe_module, e, c.expert_down);
  auto base = std::make_shared<CheckpointWeights>(engine->checkpointPtr());
  auto same = std::make_shared<MatrixRM>(base->matrix(down));
  MoeEngine replaced(engine->checkpointPtr(),
                     std::make_shared<ReplacedWeights>(base, ReplacedWeights::Replacements{{down, same}}));
  EXPECT_EQ(maxAbsDiff(replaced.logits(a), full), 0.0);
  auto zero = std::make_shared<MatrixRM>(MatrixRM::Zero(same->rows(), same->cols()));
  replaced.setWeights(std::make_shared<ReplacedWeights>(base, ReplacedWeights::Replacements{{down, zero}}));
  EXPECT_GT(maxAbsDiff(replaced.logits(a), full), 0.0);
}

class ZooFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooFamily, InvariantsHold) {
  MOEWB_REQUIRE_SHARED("models/zoo/" + GetParam());
  expectInvariants(zoo(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Families, ZooFamily,
                         ::testing::Values("mixtral", "qwen3_moe", "olmoe", "deepseek_v2", "granitemoe",
                                           "gpt_oss", "llama4_text"));

// The masks and position features the stock tiny configs leave idle, with sequences longer than the
// window / chunk: gpt-oss's sliding layers with an 8-token window, Llama 4 with 8-token chunks and a NoPE
// layer (temperature tuning, no q/k norm), Granite's multipliers.
TEST(ZooFamilyVariants, WindowsChunksNopeAndMultipliersKeepInvariants) {
  MOEWB_REQUIRE_SHARED("models/zoo");
  expectInvariants(test::prepareModelCopy(zoo("gpt_oss"), {{"sliding_window", 8}}));
  expectInvariants(test::prepareModelCopy(
      zoo("llama4_text"), {{"attention_chunk_size", 8}, {"no_rope_layers", {1, 0}}, {"floor_scale", 4}}));
  expectInvariants(test::prepareModelCopy(zoo("granitemoe"), {{"embedding_multiplier", 12.0},
                                                              {"attention_multiplier", 0.05},
                                                              {"residual_multiplier", 0.22},
                                                              {"logits_scaling", 8.0}}));
}

// Llama 4 interleaves dense layers (intermediate_size_mlp) with MoE ones; the zoo's has MoE layers only, so
// a copy turns layer 1 into a dense layer with random feed_forward.{gate,up,down}_proj weights.
TEST(ZooLlama4, DenseLayerKeepsInvariants) {
  MOEWB_REQUIRE_SHARED("models/zoo/llama4_text");
  auto src = Checkpoint::open(zoo("llama4_text").string());
  auto dir = test::makeTempDir("llama4-dense");
  SafetensorsWriter w;
  for (std::size_t i = 0; i < src->tensors().size(); ++i) {
    const auto& t = src->tensor(i);
    if (t.name.starts_with("model.layers.1.feed_forward.")) continue;
    w.addFloat(t.name, DType::F32, t.shape, src->readFloat(i));
  }
  std::mt19937 rng(13);
  std::normal_distribution<float> init(0.0f, 0.02f);
  auto random = [&](int64_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = init(rng);
    return v;
  };
  const int64_t H = 64, I = 96;
  w.addFloat("model.layers.1.feed_forward.gate_proj.weight", DType::F32, {I, H}, random(I * H));
  w.addFloat("model.layers.1.feed_forward.up_proj.weight", DType::F32, {I, H}, random(I * H));
  w.addFloat("model.layers.1.feed_forward.down_proj.weight", DType::F32, {H, I}, random(H * I));
  w.write(dir / "model.safetensors");
  auto config = src->config();
  config["moe_layers"] = {0};
  config["intermediate_size_mlp"] = I;
  std::ofstream(dir / "config.json") << config.dump(2);
  auto engine = MoeEngine::open(dir.string());
  EXPECT_EQ(engine->config().moe_layer, (std::vector<bool>{true, false}));
  EXPECT_EQ(engine->config().dense_intermediate, I);
  expectInvariants(dir);
}

// The zoo's gpt_oss has all-zero expert and attention biases and weights too small to reach the SwiGLU
// clamp (limit 7), so the HF reference cannot see them. A copy with random biases and gate/up weights
// scaled 50x (gate/up values beyond +-7) exercises both: the permutation invariant checks that each
// expert's bias slice travels with its weights, and the biases must change the output.
std::filesystem::path gptOssCopy(bool random_biases) {
  auto src = Checkpoint::open(zoo("gpt_oss").string());
  auto dir = test::makeTempDir("gpt-oss-scaled");
  SafetensorsWriter w;
  std::mt19937 rng(11);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  for (std::size_t i = 0; i < src->tensors().size(); ++i) {
    const auto& t = src->tensor(i);
    auto v = src->readFloat(i);
    if (random_biases && (t.name.ends_with("proj_bias") || t.name.ends_with("proj.bias")))
      for (auto& x : v) x = noise(rng);
    if (t.name.ends_with("experts.gate_up_proj"))
      for (auto& x : v) x *= 50.0f;
    w.addFloat(t.name, DType::F32, t.shape, v);
  }
  w.write(dir / "model.safetensors");
  std::ofstream(dir / "config.json") << src->config().dump(2);
  return dir;
}

TEST(ZooGptOss, ExpertBiasesAndClampKeepInvariants) {
  MOEWB_REQUIRE_SHARED("models/zoo/gpt_oss");
  const auto biased = gptOssCopy(true);
  expectInvariants(biased);
  auto with = MoeEngine::open(biased.string());
  auto without = MoeEngine::open(gptOssCopy(false).string());
  const auto ids = randomIds(16, with->config().vocab, 4);
  EXPECT_GT(maxAbsDiff(with->logits(ids), without->logits(ids)), 1e-3);
}

// qwen2_moe's zoo checkpoint has 16 KV heads for 4 query heads, which HF's repeat_kv cannot run either; a
// consistent copy (first 4 KV heads, qkv biases sliced alike) exercises the shared expert with its
// sigmoid gate and the q/k/v biases.
std::filesystem::path consistentQwen2Moe() {
  return test::prepareModelCopy(zoo("qwen2_moe"), nlohmann::json::object(), 4);
}

TEST(ZooQwen2Moe, SharedExpertModelKeepsInvariants) {
  MOEWB_REQUIRE_SHARED("models/zoo/qwen2_moe");
  auto dir = consistentQwen2Moe();
  auto engine = MoeEngine::open(dir.string());
  const ModelConfig& c = engine->config();
  EXPECT_EQ(c.shared_intermediate, 64);
  EXPECT_TRUE(c.shared_expert_gate);
  EXPECT_TRUE(c.qkv_bias);
  auto a = randomIds(20, c.vocab, 3);
  MatrixRM full = engine->logits(a);
  ASSERT_TRUE(full.allFinite());
  MatrixRM prefix = engine->logits(std::span<const int32_t>(a.data(), 7));
  EXPECT_LE(maxAbsDiff(prefix, full.topRows(7)), tolerance(full));
  // The shared expert contributes: zeroing its down projection changes the output.
  auto base = std::make_shared<CheckpointWeights>(engine->checkpointPtr());
  const std::string down = "model.layers.0.mlp.shared_expert.down_proj.weight";
  auto zero = std::make_shared<MatrixRM>(MatrixRM::Zero(64, 64));
  MoeEngine replaced(engine->checkpointPtr(),
                     std::make_shared<ReplacedWeights>(base, ReplacedWeights::Replacements{{down, zero}}));
  EXPECT_GT(maxAbsDiff(replaced.logits(a), full), 0.0);
}

// DeepSeek-V3 routing (sigmoid scores, e_score_correction_bias for the choice, grouped top-k, normalised
// weights times routed_scaling_factor) on a copy of the deepseek_v2 zoo checkpoint turned into V3: random
// score biases, 2 groups of 4 experts of which 1 is kept.
TEST(ZooDeepseekV3, GroupedSigmoidRoutingKeepsInvariants) {
  MOEWB_REQUIRE_SHARED("models/zoo/deepseek_v2");
  auto src = Checkpoint::open(zoo("deepseek_v2").string());
  auto dir = test::makeTempDir("deepseek-v3");
  SafetensorsWriter w;
  std::mt19937 rng(7);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  for (std::size_t i = 0; i < src->tensors().size(); ++i) {
    const auto& t = src->tensor(i);
    w.addFloat(t.name, DType::F32, t.shape, src->readFloat(i));
    if (t.name.find("mlp.gate.weight") != std::string::npos) {
      std::vector<float> bias(8);
      for (auto& b : bias) b = noise(rng);
      w.addFloat(t.name.substr(0, t.name.size() - 6) + "e_score_correction_bias", DType::F32, {8}, bias);
    }
  }
  w.write(dir / "model.safetensors");
  auto config = src->config();
  config["model_type"] = "deepseek_v3";
  config["topk_method"] = "noaux_tc";
  config["n_group"] = 2;
  config["topk_group"] = 1;
  config["norm_topk_prob"] = true;
  config["routed_scaling_factor"] = 2.5;
  std::ofstream(dir / "config.json") << config.dump(2);

  auto engine = MoeEngine::open(dir.string());
  const ModelConfig& c = engine->config();
  ASSERT_EQ(c.scoring, RouterScoring::SigmoidBiasedTopK);
  auto a = randomIds(21, c.vocab, 5);
  MatrixRM full = engine->logits(a);
  ASSERT_TRUE(full.allFinite());
  EXPECT_LE(maxAbsDiff(engine->logits(std::span<const int32_t>(a.data(), 8)), full.topRows(8)),
            tolerance(full));
  // Permuting experts inside their groups keeps the grouped routing and the output.
  std::vector<int> perm = {1, 2, 3, 0, 7, 4, 5, 6};
  MoeEngine permuted(
      engine->checkpointPtr(),
      std::make_shared<PermutedExperts>(std::make_shared<CheckpointWeights>(engine->checkpointPtr()), perm));
  EXPECT_LE(maxAbsDiff(permuted.logits(a), full), tolerance(full));
  // Both chosen experts come from one group, and the weights sum to routed_scaling_factor.
  struct Check : ForwardObserver {
    bool wantsLogits() const override { return false; }
    void onRouting(const RoutingView& v) override {
      for (int64_t t = 0; t < v.tokens; ++t) {
        EXPECT_EQ(v.experts[t * 2] / 4, v.experts[t * 2 + 1] / 4);
        EXPECT_NEAR(v.weights[t * 2] + v.weights[t * 2 + 1], 2.5, 1e-5);
      }
    }
  } check;
  SequenceBatch batch;
  batch.add(a);
  engine->forward(batch, check);
}

TEST(ZooRefusals, UnsupportedFamiliesNameModelTypeAndWhatIsMissing) {
  MOEWB_REQUIRE_SHARED("models/zoo");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"switch_transformers", "encoder-decoder"},
      {"qwen2_moe", "num_key_value_heads 16"},
  };
  for (const auto& [name, what] : cases) {
    try {
      MoeEngine::open(zoo(name).string());
      ADD_FAILURE() << name << " was accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (name != "qwen2_moe") EXPECT_NE(msg.find("model_type '" + name + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace moewb::engine

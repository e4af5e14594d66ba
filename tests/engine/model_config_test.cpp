// SPDX-License-Identifier: MIT
// config.json mistakes are the user's, so they must come back as moewb::Error naming config.json, the key
// and what was expected (the CLI's "error", exit 1), never as a JSON library exception ("internal error",
// exit 2) or a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "moewb/engine/engine.h"
#include "moewb/engine/kernels.h"
#include "moewb/error.h"
#include "test_support.h"
#include "zoo_models.h"

namespace moewb::engine {
namespace {

// The message MoeEngine::open gives for the demo model (tiny-mixtral layout) with `overrides` applied,
// or "" when it opens.
std::string openError(const nlohmann::json& overrides, const std::vector<std::string>& remove = {}) {
  auto dir = test::prepareModelCopy(test::demoModelDir(), overrides);
  if (!remove.empty()) {
    nlohmann::json config;
    std::ifstream(dir / "config.json") >> config;
    for (const auto& key : remove) config.erase(key);
    std::ofstream(dir / "config.json") << config.dump(2);
  }
  try {
    MoeEngine::open(dir.string());
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

void expectMentions(const std::string& message, const std::vector<std::string>& parts) {
  ASSERT_FALSE(message.empty()) << "the config was accepted";
  for (const auto& p : parts)
    EXPECT_NE(message.find(p), std::string::npos) << "'" << p << "' not in: " << message;
}

TEST(ModelConfigErrors, WrongValueTypesNameTheFileKeyAndExpectation) {
  expectMentions(openError({{"num_local_experts", "four"}}),
                 {"config.json", "'num_local_experts'", "\"four\"", "expected an integer"});
  expectMentions(openError({{"rms_norm_eps", "small"}}),
                 {"config.json", "'rms_norm_eps'", "expected a number"});
  expectMentions(openError({{"tie_word_embeddings", "yes"}}),
                 {"config.json", "'tie_word_embeddings'", "expected true or false"});
  expectMentions(openError({{"model_type", 7}}), {"config.json", "'model_type'", "expected a string"});
  expectMentions(openError({{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", "ten thousand"}}}}),
                 {"config.json", "'rope_parameters.rope_theta'", "expected a number"});
  expectMentions(openError({{"bos_token_id", "<s>"}}), {"config.json", "'bos_token_id'", "token id"});
}

TEST(ModelConfigErrors, MissingAndNonPositiveSizesAreNamed) {
  expectMentions(openError({}, {"hidden_size"}),
                 {"config.json", "'hidden_size' is missing", "positive integer"});
  expectMentions(openError({}, {"num_experts_per_tok"}), {"config.json", "'num_experts_per_tok' is missing"});
  // Zero heads would otherwise divide by zero computing the head size.
  expectMentions(openError({{"num_attention_heads", 0}}),
                 {"config.json", "'num_attention_heads' is 0", "positive integer"});
  expectMentions(openError({{"num_experts_per_tok", 9}}), {"config.json", "num_experts_per_tok 9"});
}

TEST(ModelConfigErrors, CliReportsAnErrorNotAnInternalError) {
  auto dir = test::prepareModelCopy(test::demoModelDir(), {{"num_local_experts", "four"}});
  std::ofstream(dir / "ids.txt") << "1 2 3 4 5 6 7 8";
  std::string out, err;
  const int rc =
      test::runCli("eval '" + dir.string() + "' --ids '" + (dir / "ids.txt").string() + "'", &out, &err);
  EXPECT_EQ(rc, 1) << err;
  EXPECT_NE(err.find("num_local_experts"), std::string::npos) << err;
  EXPECT_EQ(err.find("internal error"), std::string::npos) << err;
}

// Regression: HF's YaRN attention factor is mscale(f, mscale) / mscale(f, mscale_all_dim) only when both
// keys are truthy, otherwise 0.1 ln(f) + 1; the engine used to default a missing mscale to 1.
TEST(ModelConfigRope, YarnAttentionFactorWithOnlyMscaleAllDimFollowsHf) {
  RopeConfig rope;
  rope.type = "yarn";
  rope.factor = 4.0;
  rope.rotary_dim = 16;
  rope.original_max_positions = 4096;
  rope.mscale_all_dim = 1.0;
  const RopeTables t = makeRopeTables(rope, 1);
  EXPECT_FLOAT_EQ(t.cos[0], static_cast<float>(0.1 * std::log(4.0) + 1.0));
  rope.mscale = 1.0;  // both given: equal mscales cancel
  EXPECT_FLOAT_EQ(makeRopeTables(rope, 1).cos[0], 1.0f);
}

// Regression: DeepSeek's softmax scale takes mscale(factor, mscale_all_dim)^2 for any RoPE type but
// default (HF's yarn_apply_mscale), not only for yarn.
TEST(ModelConfigRope, DeepseekSoftmaxScaleFollowsYarnApplyMscale) {
  MOEWB_REQUIRE_SHARED("models/zoo/deepseek_v2");
  auto dir = test::prepareModelCopy(
      test::zooModel("deepseek_v2"),
      {{"rope_parameters",
        {{"rope_type", "linear"}, {"rope_theta", 10000.0}, {"factor", 4.0}, {"mscale_all_dim", 1.0}}}});
  auto engine = MoeEngine::open(dir.string());
  const ModelConfig& c = engine->config();
  const double mscale = 0.1 * std::log(4.0) + 1.0;
  EXPECT_DOUBLE_EQ(c.attention_scale, mscale * mscale / std::sqrt(static_cast<double>(c.head_dim)));
}

}  // namespace
}  // namespace moewb::engine

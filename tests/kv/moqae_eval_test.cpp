// SPDX-License-Identifier: MIT
// MoQAE end to end on the demo model: `moqae:ROUTER.json` through the engine and `moewb eval` (finite
// perplexity, bits that are those of the chosen formats) and a short training run on a measured cost table.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "moewb/engine/engine.h"
#include "moewb/engine/evaluate.h"
#include "moewb/engine/kv_cache.h"
#include "moewb/engine/variants.h"
#include "moewb/jobs/moqae_job.h"
#include "moewb/methods/moqae.h"
#include "moewb/methods/moqae_training.h"
#include "test_support.h"

namespace moewb::methods::moqae {
namespace {

std::string demoText() {
  return (test::sourceDir() / "resources/demo-text/sample.txt").string();
}

// Guards the memory accounting of `moqae:PATH`: the engine's stored bits are exactly those of the formats
// the router chose (plus fp16 for frozen chunks), and the perplexity is a number.
TEST(MoqaeEval, DemoModelBitsAreThoseOfTheChosenFormats) {
  auto engine = engine::MoeEngine::open(test::demoModelDir().string());
  const auto ids = engine::loadEvaluationIds(test::demoModelDir().string(), demoText(), "",
                                             engine->config().bos_token_id, false);
  RouterSet set = makeRouterSet(parseConfigurations("fp16,int8,int4,int2", "test"), engine->config(), 32, 3, true, 4);
  for (auto& r : set.routers) r.input_scale = 0.3;  // the demo's keys: a spread of choices from random weights
  const auto dir = test::makeTempDir("moqae-eval");
  const std::string path = (dir / "router.json").string();
  saveRouterSet(set, path);
  auto policy = std::dynamic_pointer_cast<const MoqaePolicy>(engine::makeKvCachePolicy("moqae:" + path));
  ASSERT_TRUE(policy);
  engine->setKvCachePolicy(policy);
  engine::EvalOptions options;
  options.seq_len = 128;  // 4 chunks: the first frozen
  options.max_windows = 3;
  const engine::PerplexityResult r = engine::evaluatePerplexity(*engine, ids, options);
  EXPECT_TRUE(std::isfinite(r.ppl)) << r.ppl;
  const engine::KvShape shape = engine::kvShape(engine->config());
  auto chunkBits = [&](const KvFormat& f) {
    return f.method->storedBits(KvTensor::Keys, 32, shape.kv_heads, shape.key_dim, f.settings) +
           f.method->storedBits(KvTensor::Values, 32, shape.kv_heads, shape.value_dim, f.settings);
  };
  const auto tally = policy->tally();
  int64_t want = policy->frozenChunks() * 16 * 32 * shape.kv_heads * (shape.key_dim + shape.value_dim);
  int64_t routed = 0;
  for (const auto& layer : tally)
    for (int j = 0; j < set.configCount(); ++j) {
      want += layer[j] * chunkBits(set.configs[j].format);
      routed += layer[j];
    }
  EXPECT_EQ(policy->frozenChunks(), 3 * 4);     // windows x layers
  EXPECT_EQ(routed, 3 * 4 * 3);                 // windows x layers x routed chunks
  EXPECT_EQ(r.stats.kv_stored_bits, static_cast<uint64_t>(want));
}

TEST(MoqaeEval, CliEvalTakesTheRouterSpec) {
  auto engine = engine::MoeEngine::open(test::demoModelDir().string());
  RouterSet set = makeRouterSet(parseConfigurations("fp16,int4", "test"), engine->config(), 32, 2, true, 9);
  const auto dir = test::makeTempDir("moqae-cli");
  const std::string path = (dir / "router.json").string();
  saveRouterSet(set, path);
  std::string out, err;
  ASSERT_EQ(test::runCli("eval '" + test::demoModelDir().string() + "' --text '" + demoText() +
                             "' --seq-len 64 --max-windows 2 --kv 'moqae:" + path + "' --json",
                         &out, &err),
            0)
      << err;
  const auto j = nlohmann::json::parse(out);
  const auto& row = j["variants"][1];
  EXPECT_TRUE(std::isfinite(row["ppl"].get<double>()));
  // Chunk 0 fp16, chunk 1 fp16 or int4 (keys 4 + 1 meta bits, values 4 + 0.5): between the two.
  const double bits = row["kv_avg_bits"].get<double>();
  EXPECT_GE(bits, (16 + 4.75) / 2 - 1e-9);
  EXPECT_LE(bits, 16.0);
  EXPECT_TRUE(row["kv_bytes_projected"].get<bool>());
}

// Guards `moewb moqae train`'s core: a cost table measured on the demo model and a short run that lowers
// the loss; the ROUTER.json it writes records the curve.
TEST(MoqaeEval, ShortTrainingRunLowersTheLoss) {
  const auto dir = test::makeTempDir("moqae-train");
  jobs::MoqaeTrainRequest r;
  r.model = test::demoModelDir().string();
  r.text = demoText();
  r.table.seq_len = 128;
  r.table.windows = 3;
  r.training.lambda = 0.5;
  r.training.loss = LossReading::ExpectedBits;
  r.training.steps = 150;
  r.training.lr = 1e-2;  // few steps: a larger step than the paper's 3e-4 so the test sees the loss move
  r.out = (dir / "router.json").string();
  const jobs::MoqaeTrainResult result = jobs::runMoqaeTrainJob(r);
  ASSERT_EQ(result.training.loss_curve.size(), 150u);
  EXPECT_LT(result.training.loss_curve.back(), result.training.loss_curve.front());
  const RouterSet back = loadRouterSet(r.out);
  EXPECT_EQ(back.training["loss"], "expected-bits");
  EXPECT_FALSE(back.training["loss_curve"].empty());
}

}  // namespace
}  // namespace moewb::methods::moqae

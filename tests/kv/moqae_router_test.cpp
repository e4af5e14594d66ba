// SPDX-License-Identifier: MIT
// MoQAE's router (moewb/methods/moqae.h): the MLP and the vote on hand-made inputs, routing freezing and
// sharing through the engine's KV-cache hook, and the hand-written gradient against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "moewb/engine/kv_cache.h"
#include "moewb/error.h"
#include "moewb/methods/moqae.h"
#include "moewb/methods/moqae_training.h"

namespace moewb::methods::moqae {
namespace {

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

TEST(MoqaeRouter, ForwardIsSoftmaxOfSiluOfTheProductTimesW3) {
  Router r;
  r.w1 = Eigen::MatrixXd::Identity(2, 2);
  r.w2 = Eigen::MatrixXd::Identity(2, 2);
  r.w2(1, 0) = 0.5;                                   // v = (c0 + 0.5 c1, c1)
  r.w3 = (Eigen::MatrixXd(2, 2) << 1, 2, 0, -1).finished();
  Eigen::MatrixXd c(1, 2);
  c << 1, 2;
  // u = (1, 2), v = (2, 2), h = (2, 4), a = (2 σ(2), 4 σ(4)), z = (a0, 2 a0 - a1).
  const double a0 = 2 * sigmoid(2), a1 = 4 * sigmoid(4);
  const double z0 = a0, z1 = 2 * a0 - a1;
  const double p0 = std::exp(z0) / (std::exp(z0) + std::exp(z1));
  const RouterPass pass = routerForward(r, c);
  EXPECT_NEAR(pass.probs(0, 0), p0, 1e-12);
  EXPECT_NEAR(pass.probs(0, 1), 1 - p0, 1e-12);
}

TEST(MoqaeRouter, MajorityVoteAndTiesGoToMoreBits) {
  // Top-1 per token: 0, 1, 1 -> configuration 1.
  Eigen::MatrixXd p(3, 3);
  p << 0.6, 0.3, 0.1, 0.2, 0.7, 0.1, 0.4, 0.5, 0.1;
  EXPECT_EQ(majorityVote(p, {16, 8, 4}), 1);
  // 1 vote each for 0 and 2: the tie goes to the one with more stored bits, whatever its index.
  Eigen::MatrixXd tie(2, 3);
  tie << 0.9, 0.05, 0.05, 0.1, 0.1, 0.8;
  EXPECT_EQ(majorityVote(tie, {4, 8, 9.5}), 2);
  EXPECT_EQ(majorityVote(tie, {16, 8, 4}), 0);
}

TEST(MoqaeRouter, FeaturesAreKeysAveragedOverHeads) {
  // 2 tokens, 2 heads, 2 channels, row stride 5 (one padding float).
  const float keys[] = {1, 2, 3, 4, 99, -1, 0, 1, 2, 99};
  const Eigen::MatrixXd c = chunkFeatures(keys, 2, 2, 2, 5, 2.0);
  EXPECT_DOUBLE_EQ(c(0, 0), (1 + 3) / 2.0 / 2.0);
  EXPECT_DOUBLE_EQ(c(0, 1), (2 + 4) / 2.0 / 2.0);
  EXPECT_DOUBLE_EQ(c(1, 0), (-1 + 1) / 2.0 / 2.0);
  EXPECT_DOUBLE_EQ(c(1, 1), (0 + 2) / 2.0 / 2.0);
}

// A router set for 4 layers of 1 KV head x 4 channels in which router g always picks `picks[g]` for keys of
// all ones (u_j = v_j = 1 for the picked column, W3 = 10 I), and configuration 0 (fp16) for zero keys.
std::shared_ptr<RouterSet> handMadeRouters(std::vector<int> picks, bool freeze) {
  engine::ModelConfig config;
  config.layers = 4;
  config.kv_heads = 1;
  config.head_dim = 4;
  auto set = std::make_shared<RouterSet>(
      makeRouterSet(parseConfigurations("fp16,int8,int4,int2", "test"), config, 8, 3, freeze, 1));
  for (std::size_t g = 0; g < set->routers.size(); ++g) {
    Router& r = set->routers[g];
    r.w1.setZero();
    r.w2.setZero();
    r.w1.col(picks[g]).setConstant(0.25);
    r.w2.col(picks[g]).setConstant(0.25);
    r.w3 = 10 * Eigen::MatrixXd::Identity(4, 4);
  }
  return set;
}

struct FourLayerCache {
  engine::SequenceBatch batch;
  engine::KvShape shape{1, 4, 4};
  std::vector<std::vector<float>> keys, values;  // per layer
  explicit FourLayerCache(int64_t tokens) {
    batch.add(std::vector<int32_t>(static_cast<std::size_t>(tokens), 0));
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    for (int l = 0; l < 4; ++l) {
      keys.emplace_back(static_cast<std::size_t>(tokens * 4), 1.0f);
      values.emplace_back(static_cast<std::size_t>(tokens * 4));
      for (auto& v : values.back()) v = normal(rng);
    }
  }
  engine::KvCacheSize applyAll(const engine::KvCachePolicy& policy) {
    engine::KvCacheSize total;
    for (int l = 0; l < 4; ++l)
      total += engine::applyKvCachePolicy(policy, l, batch, shape, keys[l].data(), 4, values[l].data(), 4);
    return total;
  }
};

int64_t chunkBits(const RouterSet& set, int j) {
  const KvFormat& f = set.configs[j].format;
  return f.method->storedBits(KvTensor::Keys, 8, 1, 4, f.settings) +
         f.method->storedBits(KvTensor::Values, 8, 1, 4, f.settings);
}

// Guards routing freezing and sharing: chunk 0 is fp16 in every layer; layers 1 and 2 take layer 0's
// decision although their own keys (zeros) would route to fp16; layer 3 is a group of its own.
TEST(MoqaePolicy, FreezingAndSharing) {
  auto set = handMadeRouters({3, 1}, true);  // group 0 -> int2, group 1 -> int8
  MoqaePolicy policy(set, "moqae:test");
  FourLayerCache cache(8 * 3 + 5);  // 3 complete chunks and a partial one
  std::fill(cache.keys[1].begin(), cache.keys[1].end(), 0.0f);
  std::fill(cache.keys[2].begin(), cache.keys[2].end(), 0.0f);
  const engine::KvCacheSize stored = cache.applyAll(policy);
  const auto tally = policy.tally();
  for (int l = 0; l < 3; ++l) EXPECT_EQ(tally[l], (std::vector<int64_t>{0, 0, 0, 2})) << "layer " << l;
  EXPECT_EQ(tally[3], (std::vector<int64_t>{0, 2, 0, 0}));
  EXPECT_EQ(policy.frozenChunks(), 4);  // chunk 0 of every layer
  // Bits: per layer the frozen chunk and the 5-token tail in fp16 plus two routed chunks.
  const int64_t fp16_layer = 16 * (8 + 5) * 8;
  const int64_t want = 4 * fp16_layer + 3 * 2 * chunkBits(*set, 3) + 2 * chunkBits(*set, 1);
  EXPECT_EQ(stored.bits, static_cast<uint64_t>(want));
  EXPECT_EQ(stored.elements, uint64_t(4 * 29 * 8));
}

TEST(MoqaePolicy, WithoutFreezingTheFirstChunkIsRouted) {
  auto set = handMadeRouters({2, 2}, false);
  MoqaePolicy policy(set, "moqae:test");
  FourLayerCache cache(16);
  cache.applyAll(policy);
  EXPECT_EQ(policy.frozenChunks(), 0);
  for (const auto& layer : policy.tally()) EXPECT_EQ(layer, (std::vector<int64_t>{0, 0, 2, 0}));
}

TEST(MoqaePolicy, RefusesAModelOfAnotherShape) {
  auto set = handMadeRouters({1, 1}, true);
  MoqaePolicy policy(set, "moqae:r.json");
  engine::SequenceBatch batch;
  batch.add(std::vector<int32_t>(16, 0));
  std::vector<float> k(16 * 8, 1.0f), v(16 * 8, 1.0f);
  try {
    engine::applyKvCachePolicy(policy, 0, batch, engine::KvShape{1, 8, 8}, k.data(), 8, v.data(), 8);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("moqae:r.json"), std::string::npos) << e.what();
  }
}

// A table of random features and costs: 3 windows, 2 groups, chunks 1 and 2 routed, 4 configurations.
CostTable syntheticTable(const RouterSet& set, int windows) {
  CostTable t;
  t.windows = windows;
  t.groups = set.groups();
  t.configs = set.configCount();
  t.routed_chunks = {1, 2};
  t.chunks_per_window = 3;
  std::mt19937 rng(11);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform(0, 0.05);
  for (int w = 0; w < windows; ++w) t.base_nll.push_back(3 + uniform(rng));
  for (int i = 0; i < windows * t.groups * 2; ++i) {
    Eigen::MatrixXd f(set.chunk_tokens, set.key_dim);
    for (Eigen::Index k = 0; k < f.size(); ++k) f.data()[k] = 2.5 * normal(rng);
    t.features.push_back(f);
    // Lower bits cost more: fp16 nothing, int8 little, int4 more, int2 most.
    for (double scale : {0.0, 0.001, 0.01, 0.1}) t.delta.push_back(scale * (1 + uniform(rng) * 10));
  }
  return t;
}

std::shared_ptr<RouterSet> randomRouters() {
  engine::ModelConfig config;
  config.layers = 5;  // groups of 3: {0, 1, 2}, {3, 4}
  config.kv_heads = 2;
  config.head_dim = 6;
  auto set = std::make_shared<RouterSet>(
      makeRouterSet(parseConfigurations("fp16,int8,int4,int2", "test"), config, 4, 3, true, 7));
  for (auto& r : set->routers) r.input_scale = 2.5;
  return set;
}

// Guards the hand-written backward pass of every loss reading (float64 central differences).
TEST(MoqaeTraining, GradientMatchesFiniteDifferences) {
  for (LossReading loss : {LossReading::ExpectedBits, LossReading::Text, LossReading::Printed}) {
    RouterSet set = *randomRouters();
    const CostTable table = syntheticTable(set, 3);
    const std::vector<int> windows{0, 2};
    TrainingOptions o;
    o.lambda = 0.4;
    o.loss = loss;
    std::vector<RouterGradients> grads(set.routers.size());
    for (std::size_t g = 0; g < grads.size(); ++g) grads[g].setZero(set.routers[g]);
    routerLoss(set, table, windows, o, &grads);
    double worst = 0;
    for (std::size_t g = 0; g < set.routers.size(); ++g)
      for (auto [w, dw] : {std::pair{&set.routers[g].w1, &grads[g].w1}, std::pair{&set.routers[g].w2, &grads[g].w2},
                           std::pair{&set.routers[g].w3, &grads[g].w3}})
        for (Eigen::Index i = 0; i < w->size(); ++i) {
          const double keep = w->data()[i], h = 1e-6;
          w->data()[i] = keep + h;
          const double up = routerLoss(set, table, windows, o, nullptr);
          w->data()[i] = keep - h;
          const double down = routerLoss(set, table, windows, o, nullptr);
          w->data()[i] = keep;
          const double numeric = (up - down) / (2 * h);
          worst = std::max(worst, std::abs(numeric - dw->data()[i]) / std::max(1e-4, std::abs(numeric)));
        }
    EXPECT_LT(worst, 1e-5) << lossReadingName(loss);
  }
}

TEST(MoqaeTraining, ExpectedBitsTrainingLowersTheLossAndTradesBitsWithLambda) {
  std::vector<double> bits;
  for (double lambda : {0.1, 0.9}) {
    RouterSet set = *randomRouters();
    const CostTable table = syntheticTable(set, 8);
    TrainingOptions o;
    o.lambda = lambda;
    o.loss = LossReading::ExpectedBits;
    o.steps = 400;
    o.lr = 3e-2;  // the synthetic table is small: a larger step reaches the optimum in few steps
    const TrainingResult r = trainRouters(set, table, o);
    ASSERT_EQ(r.loss_curve.size(), 400u);
    EXPECT_LT(r.loss_curve.back(), r.loss_curve.front()) << "λ=" << lambda;
    bits.push_back(r.after.avg_bits);
  }
  EXPECT_LT(bits[0], bits[1]) << "more weight on accuracy must keep more bits";
}

}  // namespace
}  // namespace moewb::methods::moqae

// SPDX-License-Identifier: MIT
// Calibration through the engine (moewb/engine/calibration.h) and how the quantizer hands it to methods:
// the Hessian of a dense matrix equals 2 X^T X of its inputs computed here independently; a routed
// expert's Hessian is over exactly the tokens routed to it; the token cap holds; a method that needs
// calibration refuses to run without it and receives each matrix's Hessian with it.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "moewb/catalog.h"
#include "moewb/engine/calibration.h"
#include "moewb/error.h"
#include "moewb/methods/registry.h"
#include "moewb/quant/model_quantizer.h"
#include "test_support.h"

namespace {

using moewb::MatrixRM;
using moewb::engine::MoeEngine;

std::vector<int32_t> someIds(int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(1 + (i * 37 + 11) % 4000);
  return ids;
}

TEST(Calibration, DenseHessianIsTwiceXtXOfTheNormedEmbeddings) {
  auto engine = MoeEngine::open(moewb::test::demoModelDir().string());
  const std::vector<int32_t> ids = someIds(48);
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  moewb::engine::CalibrationOptions o;
  o.seq_len = 48;
  const auto set = moewb::engine::collectHessians(*engine, ids, {q}, o);
  ASSERT_EQ(set.count(q), 1u);
  const auto& h = set.at(q);
  EXPECT_EQ(h.tokens, 48);
  // The input of layer 0's projections: RMSNorm of the token embeddings, in float64 here.
  const auto& ckpt = engine->checkpoint();
  const std::vector<float> embed = ckpt.readFloat(*ckpt.find("model.embed_tokens.weight"));
  const std::vector<float> norm = ckpt.readFloat(*ckpt.find("model.layers.0.input_layernorm.weight"));
  const int64_t H = engine->config().hidden;
  Eigen::MatrixXd x(int64_t(ids.size()), H);
  for (std::size_t t = 0; t < ids.size(); ++t) {
    double ms = 0;
    for (int64_t c = 0; c < H; ++c) ms += std::pow(double(embed[std::size_t(ids[t] * H + c)]), 2);
    const double inv = 1.0 / std::sqrt(ms / double(H) + engine->config().norm_eps);
    for (int64_t c = 0; c < H; ++c) x(int64_t(t), c) = double(embed[std::size_t(ids[t] * H + c)]) * inv * norm[std::size_t(c)];
  }
  const Eigen::MatrixXd expected = 2.0 * x.transpose() * x;
  EXPECT_LT((h.h - expected).norm() / expected.norm(), 1e-5);
  EXPECT_LT((h.h - h.h.transpose()).norm(), 1e-12 * expected.norm());
}

// Counts the tokens routed to each expert of layer 0.
class RoutingCounter final : public moewb::engine::ForwardObserver {
 public:
  std::map<int, int64_t> counts;
  void onRouting(const moewb::engine::RoutingView& v) override {
    if (v.layer != 0) return;
    for (int64_t i = 0; i < v.tokens * v.top_k; ++i) ++counts[v.experts[i]];
  }
  bool wantsLogits() const override { return false; }
};

TEST(Calibration, AnExpertSeesOnlyTheTokensRoutedToItAndTheCapHolds) {
  auto engine = MoeEngine::open(moewb::test::demoModelDir().string());
  std::vector<std::string> names;
  for (int e = 0; e < 8; ++e)
    for (const char* p : {"w1", "w2"})
      names.push_back("model.layers.0.block_sparse_moe.experts." + std::to_string(e) + "." + p + ".weight");
  moewb::engine::HessianCollector collector(names, /*max_tokens=*/20);
  RoutingCounter counter;
  moewb::engine::SequenceBatch batch;
  const std::vector<int32_t> ids = someIds(64);
  batch.add(ids);
  {
    const moewb::engine::ScopedLinearInputTap tap(&collector);
    engine->forward(batch, counter);
  }
  const auto set = collector.take();
  int64_t routed = 0;
  for (int e = 0; e < 8; ++e) {
    const std::string w1 = names[std::size_t(2 * e)], w2 = names[std::size_t(2 * e + 1)];
    const int64_t n = counter.counts.count(e) ? counter.counts.at(e) : 0;
    routed += n;
    if (n == 0) {
      EXPECT_EQ(set.count(w1), 0u) << "an expert no token chose has no Hessian";
      continue;
    }
    EXPECT_EQ(set.at(w1).tokens_seen, n);
    EXPECT_EQ(set.at(w2).tokens_seen, n);
    EXPECT_EQ(set.at(w1).tokens, std::min<int64_t>(n, 20));
    EXPECT_EQ(set.at(w2).cols, 512);  // the down projection's input is the intermediate activation
  }
  EXPECT_EQ(routed, 64 * 2);  // top-2
}

// A method that needs Hessians and records, as its report's kurtosis, how many tokens its matrix's
// Hessian held (-1 without one): the plumbing, not a quantizer.
class HessianProbe final : public moewb::methods::WeightMethod {
 public:
  std::string_view name() const override { return "hessian-probe"; }
  std::string_view title() const override { return "probe"; }
  std::string_view summary() const override { return "test method that needs calibration"; }
  const std::vector<moewb::methods::OptionSpec>& options() const override { return options_; }
  moewb::methods::MethodNeeds needs() const override { return moewb::methods::MethodNeeds::CalibrationHessians; }
  void validate(const moewb::quant::QuantizeSettings&) const override {}
  moewb::methods::PredictedSize predictedSize(const moewb::quant::QuantizeSettings&, int64_t, int64_t,
                                              int) const override {
    return {};
  }
  moewb::quant::QuantizedMatrix quantize(const MatrixRM& w, const moewb::quant::QuantizeSettings& s, int, uint64_t,
                                         int, const moewb::methods::IterationCallback&,
                                         const moewb::quant::MatrixHessian* h) const override {
    moewb::quant::QuantizeSettings rtn = s;
    rtn.method = "rtn";
    moewb::quant::QuantizedMatrix q = moewb::quant::quantizeMatrix(w, rtn, 0, 0);
    q.method = s.method;
    q.kurtosis = h ? double(h->tokens) : -1.0;
    return q;
  }
  std::vector<moewb::methods::OptionSpec> options_;
};
const moewb::methods::MethodRegistrar probe_registrar(std::make_unique<HessianProbe>());

TEST(Calibration, AMethodThatNeedsItGetsEachMatrixsHessianAndRefusesToRunWithout) {
  const moewb::ModelCatalog catalog(moewb::Checkpoint::open(moewb::test::demoModelDir().string()));
  std::vector<std::size_t> mats;
  for (std::size_t i : moewb::quant::quantizableMatrices(catalog))
    if (catalog.matrices()[i].name.rfind("model.layers.0.", 0) == 0) mats.push_back(i);
  moewb::quant::QuantizeSettings s = moewb::methods::weightMethod("hessian-probe").defaults();
  try {
    moewb::quant::quantizeModel(catalog, s, mats, {});
    FAIL() << "ran without calibration";
  } catch (const moewb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("method hessian-probe needs calibration data"), std::string::npos) << e.what();
  }
  auto engine = MoeEngine::open(moewb::test::demoModelDir().string());
  std::vector<std::string> names;
  for (std::size_t i : mats) names.push_back(catalog.matrices()[i].name);
  moewb::engine::CalibrationOptions o;
  o.seq_len = 32;
  const moewb::quant::CalibrationSet set = moewb::engine::collectHessians(*engine, someIds(64), names, o);
  moewb::quant::PipelineOptions options;
  options.calibration = &set;
  const auto result = moewb::quant::quantizeModel(catalog, s, mats, {}, {}, {}, {}, options);
  for (const auto& q : result.matrices) {
    const auto it = set.find(q.source.name);
    EXPECT_EQ(q.kurtosis, it == set.end() ? -1.0 : double(it->second.tokens)) << q.source.name;
  }
  EXPECT_EQ(set.at("model.layers.0.self_attn.q_proj.weight").tokens, 64);
}

}  // namespace

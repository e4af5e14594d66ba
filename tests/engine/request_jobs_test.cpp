// SPDX-License-Identifier: MIT
// The request objects that `moewb eval/freq/kv/spectrum` and the GUI both run (core/include/moewb/jobs):
// each gives what the core functions give when called step by step, reports its variants as they
// complete, refuses a bad request before reading the model, and stops when progress says so.
#include <gtest/gtest.h>

#include <fstream>

#include "moewb/catalog.h"
#include "moewb/engine/engine.h"
#include "moewb/engine/evaluate.h"
#include "moewb/engine/kv_stats.h"
#include "moewb/engine/variants.h"
#include "moewb/error.h"
#include "moewb/jobs/eval_job.h"
#include "moewb/jobs/freq_job.h"
#include "moewb/jobs/kv_job.h"
#include "moewb/jobs/spectrum_job.h"
#include "moewb/quant/analysis.h"
#include "test_support.h"

namespace moewb::jobs {
namespace {

std::string demoModel() {
  return test::demoModelDir().string();
}
std::string sampleText() {
  return (test::sourceDir() / "resources" / "demo-text" / "sample.txt").string();
}

TEST(RequestJobs, EvalEqualsTheCoreStepsAndReportsEachVariant) {
  EvalRequest r;
  r.model = demoModel();
  r.text = sampleText();
  r.options.seq_len = 64;
  r.options.max_windows = 2;
  r.quick_specs = {"rtn:3"};
  std::vector<std::string> seen;
  const EvalJobResult result =
      runEvalJob(r, {}, [&](const EvalVariantResult& v) { seen.push_back(v.label); });
  ASSERT_EQ(result.variants.size(), 2u);
  EXPECT_EQ(seen, (std::vector<std::string>{"original", "rtn:3"}));

  auto engine = engine::MoeEngine::open(r.model);
  const auto ids = engine::loadEvaluationIds(r.model, r.text, "", engine->config().bos_token_id, false);
  EXPECT_EQ(result.ids, ids.size());
  EXPECT_EQ(result.variants[0].perplexity.ppl, engine::evaluatePerplexity(*engine, ids, r.options).ppl);
  EXPECT_TRUE(result.variants[0].original);
  EXPECT_EQ(result.variants[0].weight_bytes, engine->checkpoint().totalBytes());
  const engine::WeightVariant rtn = engine::quantizeVariant(engine->checkpointPtr(), "rtn:3");
  engine->setWeights(rtn.weights);
  EXPECT_EQ(result.variants[1].perplexity.ppl, engine::evaluatePerplexity(*engine, ids, r.options).ppl);
  EXPECT_EQ(result.variants[1].replaced_matrices, rtn.replaced_matrices);
  EXPECT_LT(result.variants[1].weight_bytes, result.variants[0].weight_bytes);
}

TEST(RequestJobs, EvalRefusesBadRequestsAndStopsOnCancel) {
  EvalRequest r;
  r.model = demoModel();
  r.text = sampleText();
  r.quick_specs = {"rtn3"};
  EXPECT_THROW(runEvalJob(r), Error);  // the spec, before the model is read
  r.quick_specs.clear();
  r.original = false;
  EXPECT_THROW(runEvalJob(r), Error);  // nothing to evaluate
  r.original = true;
  r.options.seq_len = 1 << 20;
  try {
    runEvalJob(r);
    ADD_FAILURE() << "a text shorter than one window was evaluated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample.txt"), std::string::npos) << e.what();
  }
  r.options.seq_len = 64;
  EXPECT_THROW(runEvalJob(r, [](double, std::string_view) { return false; }), Cancelled);
}

TEST(RequestJobs, FreqOfATextShorterThanOneWindowCountsItAsOneWindow) {
  // 40 ids of the sample text, as a file of ids (`moewb freq --ids`).
  const auto dir = test::makeTempDir("moewb-freq-job");
  auto engine = engine::MoeEngine::open(demoModel());
  const auto ids =
      engine::loadEvaluationIds(demoModel(), sampleText(), "", engine->config().bos_token_id, false);
  ASSERT_GE(ids.size(), 40u);
  std::string text;
  for (std::size_t i = 0; i < 40; ++i) text += std::to_string(ids[i]) + '\n';
  std::ofstream((dir / "ids.txt").string()) << text;
  FreqRequest r;
  r.model = demoModel();
  r.ids = (dir / "ids.txt").string();
  r.seq_len = 256;
  const engine::ExpertFrequencyFile f = runFreqJob(r);
  EXPECT_EQ(f.seq_len, 40);
  EXPECT_EQ(f.frequency.tokens, 40);
  EXPECT_EQ(f.model, engine->checkpoint().root());
  ASSERT_FALSE(f.frequency.layers.empty());
  int64_t routed = 0;
  for (int64_t c : f.frequency.layers.front().counts) routed += c;
  EXPECT_EQ(routed, 40 * f.frequency.top_k);  // every position routes to top-k experts
  r.text = sampleText();
  EXPECT_THROW(runFreqJob(r), Error);  // --text and --ids
}

TEST(RequestJobs, KvCapturesTruncatesAndSaves) {
  const auto dir = test::makeTempDir("moewb-kv-job");
  KvRequest r;
  r.model = demoModel();
  r.prompt = "The quick brown fox jumps over the lazy dog, again and again and again.";
  r.max_tokens = 8;
  r.out = (dir / "kv.safetensors").string();
  const KvJobResult result = runKvJob(r);
  ASSERT_TRUE(result.capture);
  EXPECT_EQ(result.capture->length, 8);
  EXPECT_EQ(result.capture->pieces.size(), 8u);
  ASSERT_EQ(int(result.channels.size()), result.capture->layers);
  EXPECT_EQ(result.sink_mass, result.capture->sinkMassPerLayer());
  const engine::KvLayerChannels c = engine::kvLayerChannels(*result.capture, 0, r.outlier_factor);
  EXPECT_EQ(result.channels[0].key_outliers.channels, c.key_outliers.channels);
  EXPECT_EQ(engine::loadKvCapture(r.out).length, 8);
  KvRequest none;
  none.model = demoModel();
  EXPECT_THROW(runKvJob(none), Error);
}

TEST(RequestJobs, SpectrumByNameOrIndexGivesTheSameResidual) {
  SpectrumRequest r;
  r.catalog = std::make_shared<const ModelCatalog>(Checkpoint::open(demoModel()));
  const std::size_t index = 0;
  r.tensor = r.catalog->matrices()[index].name;
  r.ranks = {0, 4, 8};
  const SpectrumJobResult byName = runSpectrumJob(r);
  EXPECT_EQ(byName.matrix, index);
  EXPECT_EQ(byName.rank_at_tau, quant::rankAtTau(byName.spectrum.sigma, r.tau));
  ASSERT_EQ(byName.error_at_rank.size(), 3u);
  EXPECT_LT(byName.error_at_rank[2], byName.error_at_rank[0]);
  r.tensor.clear();
  r.matrix = std::ptrdiff_t(index);
  r.ranks.clear();
  const SpectrumJobResult byIndex = runSpectrumJob(r);
  EXPECT_EQ(byIndex.spectrum.sigma, byName.spectrum.sigma);
  EXPECT_EQ(byIndex.ranks.back(), int(byIndex.spectrum.sigma.size()));  // the default list ends at full rank
  r.matrix = -1;
  r.tensor = "no.such.weight";
  EXPECT_THROW(runSpectrumJob(r), Error);
  r.tensor = byName.tensor;
  r.method = "milo";
  EXPECT_THROW(runSpectrumJob(r), Error);  // not a base quantizer
}

}  // namespace
}  // namespace moewb::jobs

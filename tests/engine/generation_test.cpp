// SPDX-License-Identifier: MIT
// Generation with a KV cache (MoeEngine::newDecodeState / extend, engine::generate): a prompt fed in
// pieces and then token by token gives the logits one forward pass over the whole sequence gives, for
// every family and mask (sliding window, Llama-4 chunks and NoPE temperature, MLA, sinks); sequences
// decoded together equal each decoded alone; greedy generation equals HF transformers' where the
// reference file exists; sampling is reproducible and its top-p set is the nucleus.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "moewb/engine/engine.h"
#include "moewb/engine/generate.h"
#include "moewb/engine/kv_cache.h"
#include "moewb/engine/tokenizer.h"
#include "moewb/error.h"
#include "moewb/methods/kv_method.h"
#include "test_support.h"
#include "zoo_models.h"

namespace moewb::engine {
namespace {

std::vector<int32_t> randomIds(int n, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& i : ids) i = d(rng);
  return ids;
}

// The logits a pass delivers, by the row index onLogits gives (tokens, or sequences with lastLogitsOnly).
struct Rows final : ForwardObserver {
  explicit Rows(int64_t rows, int64_t vocab, bool last_only = false)
      : out(MatrixRM::Constant(rows, vocab, NAN)), last(last_only) {}
  bool lastLogitsOnly() const override { return last; }
  void onLogits(int64_t r0, int64_t rows, const float* l, int64_t v) override {
    out.middleRows(r0, rows) = Eigen::Map<const MatrixRM>(l, rows, v);
  }
  MatrixRM out;
  bool last;
};

SequenceBatch oneSequence(std::span<const int32_t> ids) {
  SequenceBatch b;
  b.add(ids);
  return b;
}

// The bar: float32 rounding of a different summation order (attention over the cache vs the square
// matrix), relative to the logits' scale.
double tolerance(const MatrixRM& reference) {
  return 1e-4 * std::max(1.0, static_cast<double>(reference.cwiseAbs().maxCoeff()));
}

// Feeds `ids` as the pieces [0, cuts[0]), [cuts[0], cuts[1]), ... and then one token at a time, and checks
// every delivered row against the full forward pass: all rows of the pieces (onLogits by token), the last
// row of each single-token step (lastLogitsOnly).
void expectIncrementalEqualsFull(const MoeEngine& engine, const std::vector<int32_t>& ids,
                                 const std::vector<int64_t>& cuts) {
  const int64_t vocab = engine.config().vocab;
  const MatrixRM full = engine.logits(ids);
  ASSERT_TRUE(full.allFinite());
  const double tol = tolerance(full);
  auto state = engine.newDecodeState(1);
  int64_t begin = 0;
  double worst = 0;
  for (int64_t end : cuts) {
    const std::span<const int32_t> piece(ids.data() + begin, static_cast<std::size_t>(end - begin));
    Rows rows(end - begin, vocab);
    engine.extend(*state, oneSequence(piece), rows);
    EXPECT_EQ(state->length(0), end);
    worst = std::max(worst, double((rows.out - full.middleRows(begin, end - begin)).cwiseAbs().maxCoeff()));
    begin = end;
  }
  for (int64_t t = begin; t < static_cast<int64_t>(ids.size()); ++t) {
    Rows last(1, vocab, true);
    engine.extend(*state, oneSequence(std::span<const int32_t>(&ids[t], 1)), last);
    worst = std::max(worst, double((last.out.row(0) - full.row(t)).cwiseAbs().maxCoeff()));
  }
  EXPECT_EQ(state->length(0), static_cast<int64_t>(ids.size()));
  EXPECT_GT(state->bytes(), 0u);
  std::printf("[ extend   ] %-40s max|extend - forward| = %.3g (bar %.3g)\n",
              engine.config().model_type.c_str(), worst, tol);
  EXPECT_LE(worst, tol) << engine.config().describe();
}

std::unique_ptr<MoeEngine> demoEngine() {
  return MoeEngine::open(test::demoModelDir().string());
}

TEST(Generation, DemoModelPiecesThenTokensEqualOneForwardPass) {
  auto engine = demoEngine();
  expectIncrementalEqualsFull(*engine, randomIds(40, engine->config().vocab, 3), {17, 30, 33});
}

TEST(Generation, TinyMixtralPiecesThenTokensEqualOneForwardPass) {
  MOEWB_REQUIRE_SHARED("models/tiny-mixtral");
  auto engine = MoeEngine::open((test::sharedDir() / "models" / "tiny-mixtral").string());
  expectIncrementalEqualsFull(*engine, randomIds(48, engine->config().vocab, 4), {20, 21, 35});
}

struct ZooCase {
  std::string name, model;
  nlohmann::json overrides = nlohmann::json::object();
  int keep_kv_heads = 0;
};

// Test names in ctest show the case, not the struct's bytes.
void PrintTo(const ZooCase& c, std::ostream* os) {
  *os << c.name;
}

class ZooGeneration : public ::testing::TestWithParam<ZooCase> {};

// 26 tokens cross the 8-token windows and chunks several times, before and after the pieces' cuts.
TEST_P(ZooGeneration, PiecesThenTokensEqualOneForwardPass) {
  const ZooCase& c = GetParam();
  MOEWB_REQUIRE_SHARED("models/zoo/" + c.model);
  auto engine =
      MoeEngine::open(test::prepareModelCopy(test::zooModel(c.model), c.overrides, c.keep_kv_heads).string());
  expectIncrementalEqualsFull(*engine, randomIds(26, engine->config().vocab, 5), {5, 13, 14});
}

INSTANTIATE_TEST_SUITE_P(
    Families, ZooGeneration,
    ::testing::Values(ZooCase{"mixtral", "mixtral"}, ZooCase{"qwen3_moe", "qwen3_moe"},
                      ZooCase{"olmoe", "olmoe"}, ZooCase{"deepseek_v2_mla", "deepseek_v2"},
                      ZooCase{"granitemoe", "granitemoe"},
                      ZooCase{"qwen2_moe", "qwen2_moe", nlohmann::json::object(), 4},
                      ZooCase{"gpt_oss_sinks_window8", "gpt_oss", {{"sliding_window", 8}}},
                      ZooCase{"llama4_chunk8_nope_temperature",
                              "llama4_text",
                              {{"attention_chunk_size", 8}, {"no_rope_layers", {1, 0}}, {"floor_scale", 4}}}),
    [](const ::testing::TestParamInfo<ZooCase>& info) { return info.param.name; });

// Sequences of different lengths in one batch, one of them idle in some steps, give what each gives alone.
TEST(Generation, SequencesDecodedTogetherEqualEachAlone) {
  auto engine = demoEngine();
  const int64_t vocab = engine->config().vocab;
  const std::vector<int32_t> a = randomIds(30, int(vocab), 6), b = randomIds(19, int(vocab), 7);
  const MatrixRM full_a = engine->logits(a), full_b = engine->logits(b);
  auto state = engine->newDecodeState(2);
  // Prefill: a's first 12 tokens and b's first 5, then steps that feed one token to each sequence that
  // still has some, and a step where only b moves.
  int64_t pa = 12, pb = 5;
  {
    SequenceBatch batch;
    batch.add(std::span<const int32_t>(a.data(), pa));
    batch.add(std::span<const int32_t>(b.data(), pb));
    Rows last(2, vocab, true);
    engine->extend(*state, batch, last);
    EXPECT_LE((last.out.row(0) - full_a.row(pa - 1)).cwiseAbs().maxCoeff(), tolerance(full_a));
    EXPECT_LE((last.out.row(1) - full_b.row(pb - 1)).cwiseAbs().maxCoeff(), tolerance(full_b));
  }
  {
    SequenceBatch batch;
    batch.add({});
    batch.add(std::span<const int32_t>(b.data() + pb, 3));
    pb += 3;
    Rows last(2, vocab, true);
    engine->extend(*state, batch, last);
    EXPECT_TRUE(last.out.row(0).array().isNaN().all()) << "an idle sequence gets no logits row";
    EXPECT_LE((last.out.row(1) - full_b.row(pb - 1)).cwiseAbs().maxCoeff(), tolerance(full_b));
  }
  while (pa < int64_t(a.size()) || pb < int64_t(b.size())) {
    SequenceBatch batch;
    const bool move_a = pa < int64_t(a.size()), move_b = pb < int64_t(b.size());
    batch.add(move_a ? std::span<const int32_t>(&a[pa], 1) : std::span<const int32_t>());
    batch.add(move_b ? std::span<const int32_t>(&b[pb], 1) : std::span<const int32_t>());
    Rows last(2, vocab, true);
    engine->extend(*state, batch, last);
    if (move_a)
      EXPECT_LE((last.out.row(0) - full_a.row(pa++)).cwiseAbs().maxCoeff(), tolerance(full_a)) << pa;
    if (move_b)
      EXPECT_LE((last.out.row(1) - full_b.row(pb++)).cwiseAbs().maxCoeff(), tolerance(full_b)) << pb;
  }
  EXPECT_EQ(state->length(0), int64_t(a.size()));
  EXPECT_EQ(state->length(1), int64_t(b.size()));

  // The same through the generation loop: a batch of two prompts, greedy, equals each prompt alone.
  GenerateOptions greedy;
  greedy.max_new_tokens = 12;
  greedy.stop_at_eos = false;
  const BatchGenerateResult both =
      generateBatch(*engine, {a, std::vector<int32_t>(b.begin(), b.begin() + 7)}, greedy);
  EXPECT_EQ(both.sequences[0].new_ids, generate(*engine, a, greedy).new_ids);
  EXPECT_EQ(both.sequences[1].new_ids,
            generate(*engine, std::vector<int32_t>(b.begin(), b.begin() + 7), greedy).new_ids);
  EXPECT_EQ(both.timings.prefill_tokens, int64_t(a.size()) + 7);
  EXPECT_EQ(both.timings.decode_tokens, 2 * (12 - 1));
}

// Greedy generation is the argmax of the logits a forward pass over prompt + generated ids gives.
TEST(Generation, GreedyTokensAreTheArgmaxOfTheFullPass) {
  auto engine = demoEngine();
  const std::vector<int32_t> prompt = randomIds(9, engine->config().vocab, 8);
  GenerateOptions o;
  o.max_new_tokens = 10;
  o.stop_at_eos = false;
  const GenerateResult r = generate(*engine, prompt, o);
  ASSERT_EQ(r.new_ids.size(), 10u);
  EXPECT_EQ(r.stopped_by, StopReason::Length);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), r.new_ids.begin(), r.new_ids.end() - 1);
  const MatrixRM full = engine->logits(all);
  for (std::size_t i = 0; i < r.new_ids.size(); ++i) {
    Eigen::Index best = 0;
    full.row(int64_t(prompt.size() + i - 1)).maxCoeff(&best);
    EXPECT_EQ(r.new_ids[i], int32_t(best)) << "token " << i;
  }
  EXPECT_EQ(r.timings.prefill_tokens, 9);
  EXPECT_EQ(r.timings.decode_tokens, 9);
  // The cache holds K and V of every layer for all tokens but the last new one, float32.
  const ModelConfig& c = engine->config();
  EXPECT_EQ(r.timings.peak_kv_cache_bytes,
            uint64_t(c.layers) * (9 + 9) * 2 * c.kv_heads * c.head_dim * sizeof(float));
}

TEST(Generation, StopsAtEndOfSequence) {
  auto engine = demoEngine();
  const std::vector<int32_t> prompt = randomIds(6, engine->config().vocab, 9);
  GenerateOptions o;
  o.max_new_tokens = 8;
  o.stop_at_eos = false;
  const GenerateResult free_run = generate(*engine, prompt, o);
  // Declare the third generated token an end-of-sequence id: generation stops there and keeps it.
  o.stop_at_eos = true;
  o.eos_ids = {free_run.new_ids[2]};
  const GenerateResult stopped = generate(*engine, prompt, o);
  const auto first = std::find(free_run.new_ids.begin(), free_run.new_ids.end(), free_run.new_ids[2]);
  EXPECT_EQ(stopped.new_ids, std::vector<int32_t>(free_run.new_ids.begin(), first + 1));
  EXPECT_EQ(stopped.stopped_by, StopReason::Eos);
}

// HF transformers fp32 `generate(do_sample=False, max_new_tokens=48)` from the first 64 ids of the
// evaluation stream (reference.json's prompt_ids), written by the HF reference script.
TEST(Generation, TinyMixtralGreedyEqualsTransformers) {
  MOEWB_REQUIRE_SHARED("models/tiny-mixtral");
  const auto ref_path = test::sourceDir() / "tests" / "data" / "hf-generate" / "tiny-mixtral-greedy48.json";
  if (!std::filesystem::exists(ref_path))
    GTEST_SKIP() << ref_path << " is not present (made by the HF reference script of #34)";
  nlohmann::json ref;
  std::ifstream(ref_path) >> ref;
  const auto prompt = ref.at("prompt_ids").get<std::vector<int32_t>>();
  const auto expected = ref.at("new_ids").get<std::vector<int32_t>>();
  // The prompt is the evaluation stream's start: [bos] + encode(test.txt).
  const auto model = test::sharedDir() / "models" / "tiny-mixtral";
  const auto tokenizer = Tokenizer::forModel(model.string());
  const auto stream = tokenizeForEvaluation(
      *tokenizer, readTextFile((test::sharedDir() / "corpus" / "test.txt").string()), 1);
  ASSERT_EQ(prompt, std::vector<int32_t>(stream.begin(), stream.begin() + 64));
  auto engine = MoeEngine::open(model.string());
  GenerateOptions o;
  o.max_new_tokens = int(expected.size());
  const GenerateResult r = generate(*engine, prompt, o);
  EXPECT_EQ(r.new_ids, expected);
}

TEST(Sampling, SameSeedSameTokensAndTinyTopPIsGreedy) {
  auto engine = demoEngine();
  const std::vector<int32_t> prompt = randomIds(8, engine->config().vocab, 10);
  GenerateOptions sample;
  sample.greedy = false;
  sample.temperature = 1.3;
  sample.top_p = 0.95;
  sample.seed = 42;
  sample.max_new_tokens = 16;
  sample.stop_at_eos = false;
  const auto a = generate(*engine, prompt, sample).new_ids;
  EXPECT_EQ(generate(*engine, prompt, sample).new_ids, a);
  sample.seed = 43;
  EXPECT_NE(generate(*engine, prompt, sample).new_ids, a)
      << "16 draws at temperature 1.3 repeated by another seed";

  GenerateOptions greedy = sample;
  greedy.greedy = true;
  sample.top_p = 1e-9;
  EXPECT_EQ(generate(*engine, prompt, sample).new_ids, generate(*engine, prompt, greedy).new_ids);
}

// Probabilities 0.5, 0.3, 0.15, 0.05: top-p 0.7 keeps the first two (0.5 < 0.7, 0.8 >= 0.7), renormalised to
// 0.625 / 0.375; temperature 2 flattens them to sqrt(p) / sum sqrt(p) before the nucleus.
TEST(Sampling, TopPKeepsTheNucleusAndDrawsInProportion) {
  const std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
  std::vector<float> logits;
  for (double x : p) logits.push_back(float(std::log(x)));
  GenerateOptions o;
  o.greedy = false;
  o.top_p = 0.7;
  o.seed = 7;
  TokenSampler sampler(o);
  std::vector<int> count(4, 0);
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++count[sampler.next(logits.data(), 4)];
  EXPECT_EQ(count[2] + count[3], 0);
  EXPECT_NEAR(count[0] / double(draws), 0.625, 0.015);

  o.temperature = 2.0;
  o.top_p = 1.0;
  TokenSampler warm(o);
  std::vector<int> warm_count(4, 0);
  for (int i = 0; i < draws; ++i) ++warm_count[warm.next(logits.data(), 4)];
  double norm = 0;
  for (double x : p) norm += std::sqrt(x);
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(warm_count[k] / double(draws), std::sqrt(p[k]) / norm, 0.015) << k;
}

TEST(Generation, BadOptionsNameTheOption) {
  auto engine = demoEngine();
  const std::vector<int32_t> prompt = {1, 2, 3};
  auto message = [&](GenerateOptions o, std::vector<int32_t> ids) -> std::string {
    try {
      generate(*engine, ids, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  GenerateOptions o;
  o.max_new_tokens = 0;
  EXPECT_NE(message(o, prompt).find("--max-new-tokens"), std::string::npos);
  o = {};
  o.greedy = false;
  o.top_p = 1.5;
  EXPECT_NE(message(o, prompt).find("--top-p"), std::string::npos);
  o.top_p = 0.9;
  o.temperature = 0;
  EXPECT_NE(message(o, prompt).find("--temperature"), std::string::npos);
  EXPECT_NE(message({}, {}).find("no tokens"), std::string::npos);
  EXPECT_NE(message({}, {1, engine->config().vocab}).find("vocabulary"), std::string::npos);
}

TEST(Generation, CancelStopsBetweenTokens) {
  auto engine = demoEngine();
  GenerateOptions o;
  o.max_new_tokens = 30;
  o.stop_at_eos = false;
  int tokens = 0;
  EXPECT_THROW(
      generate(
          *engine, std::vector<int32_t>{1, 5, 9}, o, [&](double, std::string_view) { return tokens < 4; },
          nullptr, [&](int, int32_t) { ++tokens; }),
      Cancelled);
  EXPECT_EQ(tokens, 4);
}

TEST(Generation, ExtendRefusesWhatItCannotDo) {
  auto engine = demoEngine();
  auto other = demoEngine();
  auto state = engine->newDecodeState(2);
  Rows rows(4, engine->config().vocab);
  SequenceBatch one = oneSequence(std::vector<int32_t>{1, 2});
  EXPECT_THROW(engine->extend(*state, one, rows), Error);  // 1 sequence for a cache of 2
  auto single = engine->newDecodeState(1);
  EXPECT_THROW(other->extend(*single, one, rows), Error);  // a cache of another engine
  struct WantsAttention final : ForwardObserver {
    bool wantsAttention() const override { return true; }
  } attention;
  EXPECT_THROW(engine->extend(*single, one, attention), Error);
  // A cancelled step leaves some layers with the new rows: the cache is refused afterwards.
  ProgressReporter cancel([](double, std::string_view) { return false; });
  EXPECT_THROW(engine->extend(*single, one, rows, &cancel), Cancelled);
  EXPECT_THROW(engine->extend(*single, one, rows), Error);
}

// With a KV-cache policy: a prompt in one pass stores exactly the cache forward() simulates, fp16 (a format
// per element) gives forward()'s logits token by token too, and the stored size after decoding is the
// size kv_cache.h's formula gives for that many tokens.
TEST(GenerationKvPolicy, OnePassEqualsForwardAndSizesFollowTheFormula) {
  auto engine = demoEngine();
  const std::vector<int32_t> ids = randomIds(37, engine->config().vocab, 11);
  for (const char* spec : {"int4:chunk=8", "kivi-2:residual=8:chunk=4", "fp16"}) {
    SCOPED_TRACE(spec);
    auto policy = std::make_shared<FixedKvCachePolicy>(methods::parseKvSpec(spec));
    engine->setKvCachePolicy(policy);
    const MatrixRM full = engine->logits(ids);
    auto state = engine->newDecodeState(1);
    Rows rows(int64_t(ids.size()), engine->config().vocab);
    engine->extend(*state, oneSequence(ids), rows);
    EXPECT_LE((rows.out - full).cwiseAbs().maxCoeff(), tolerance(full));

    auto stepwise = engine->newDecodeState(1);
    Rows first(10, engine->config().vocab);
    engine->extend(*stepwise, oneSequence(std::span<const int32_t>(ids.data(), 10)), first);
    ForwardStats stats;
    for (std::size_t t = 10; t < ids.size(); ++t) {
      Rows last(1, engine->config().vocab, true);
      stats = engine->extend(*stepwise, oneSequence(std::span<const int32_t>(&ids[t], 1)), last);
      if (std::string(spec) == "fp16")
        EXPECT_LE((last.out.row(0) - full.row(int64_t(t))).cwiseAbs().maxCoeff(), tolerance(full)) << t;
    }
    const KvCacheSize expected =
        kvCacheSize(engine->config(), policy->spec().format, policy->chunkTokens(), int64_t(ids.size()));
    EXPECT_EQ(stats.kv_stored_bits, expected.bits);
    EXPECT_EQ(stats.kv_elements, expected.elements);
  }
}

}  // namespace
}  // namespace moewb::engine

// SPDX-License-Identifier: MIT
// `moewb generate` and its request object (jobs::GenerateRequest, which the GUI's "Try it" box runs too):
// the job gives what engine::generate gives on the same ids and weights, streams its text, loads an export
// folder as `eval --quantized` does; the CLI prints the JSON fields scripts read and refuses bad input with
// a message naming the option.
#include "moewb/jobs/generate_job.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moewb/engine/engine.h"
#include "moewb/engine/generate.h"
#include "moewb/engine/tokenizer.h"
#include "moewb/engine/variants.h"
#include "moewb/error.h"
#include "test_support.h"

namespace moewb::jobs {
namespace {

std::string demoModel() {
  return test::demoModelDir().string();
}

TEST(GenerateJob, PromptTextEqualsCoreGenerateAndStreamsItsText) {
  GenerateRequest r;
  r.model = demoModel();
  r.prompt = "The history of the city";
  r.options.max_new_tokens = 12;
  r.options.stop_at_eos = false;
  std::vector<std::string> texts;
  const GenerateJobResult result = runGenerateJob(r, {}, [&](const std::string& t) { texts.push_back(t); });

  auto engine = engine::MoeEngine::open(r.model);
  auto tokenizer = engine::Tokenizer::forModel(r.model);
  const auto ids = engine::tokenizeForEvaluation(*tokenizer, r.prompt, engine->config().bos_token_id);
  const engine::GenerateResult direct = engine::generate(*engine, ids, r.options, {}, tokenizer.get());
  EXPECT_EQ(result.generation.prompt_ids, ids);
  EXPECT_EQ(result.generation.new_ids, direct.new_ids);
  EXPECT_EQ(result.generation.text, direct.text);
  EXPECT_FALSE(result.generation.text.empty());
  ASSERT_EQ(texts.size(), 12u);
  EXPECT_EQ(texts.back(), direct.text);
  EXPECT_EQ(result.variant, "original");
  EXPECT_GT(result.generation.timings.prefillTokensPerSecond(), 0);
  EXPECT_GT(result.generation.timings.decodeTokensPerSecond(), 0);
  EXPECT_GT(result.peak_rss_bytes, 0);
}

TEST(GenerateJob, ExportFolderReplacesTheWeightsAsEvalDoes) {
  const auto out = test::makeTempDir("moewb-generate-rtn");
  std::string log;
  ASSERT_EQ(test::runCli("quantize '" + demoModel() + "' --method rtn --bits 3 --out '" +
                             (out / "rtn3").string() + "'",
                         &log, &log),
            0)
      << log;
  GenerateRequest r;
  r.model = demoModel();
  r.ids = {1, 415, 2936, 302};
  r.quantized = (out / "rtn3").string();
  r.options.max_new_tokens = 10;
  r.options.stop_at_eos = false;
  const GenerateJobResult result = runGenerateJob(r);
  EXPECT_NE(result.variant, "original");

  auto engine = engine::MoeEngine::open(r.model);
  engine->setWeights(engine::loadReplacementCheckpoint(engine->checkpointPtr(), r.quantized).weights);
  EXPECT_EQ(result.generation.new_ids, engine::generate(*engine, r.ids, r.options).new_ids);
}

TEST(GenerateJob, BatchOfCopiesGivesTheSingleResultAndCountsEveryToken) {
  GenerateRequest r;
  r.model = demoModel();
  r.ids = {1, 415, 2936};
  r.options.max_new_tokens = 6;
  r.options.stop_at_eos = false;
  const GenerateJobResult one = runGenerateJob(r);
  r.batch = 4;
  const GenerateJobResult four = runGenerateJob(r);
  EXPECT_EQ(four.generation.new_ids, one.generation.new_ids);
  EXPECT_EQ(four.generation.timings.prefill_tokens, 4 * 3);
  EXPECT_EQ(four.generation.timings.decode_tokens, 4 * 5);
  EXPECT_EQ(four.generation.timings.peak_kv_cache_bytes, 4 * one.generation.timings.peak_kv_cache_bytes);
}

TEST(GenerateJob, RefusesBadRequestsBeforeRunning) {
  GenerateRequest r;
  r.model = demoModel();
  EXPECT_THROW(runGenerateJob(r), Error);  // no prompt
  r.prompt = "x";
  r.ids = {1};
  EXPECT_THROW(runGenerateJob(r), Error);  // both
  r.prompt.clear();
  r.ids = {1, 1 << 20};
  try {
    runGenerateJob(r);
    ADD_FAILURE() << "an id outside the vocabulary ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--ids"), std::string::npos) << e.what();
  }
}

// The CLI: JSON fields, the text output's numbers, and errors naming the option.
TEST(GenerateCli, JsonHasTheFieldsAndEqualsTheCore) {
  std::string out, err;
  ASSERT_EQ(test::runCli("generate --ids 1,415,2936 --max-new-tokens 7 --ignore-eos --device cpu --json",
                         &out, &err),
            0)
      << err;
  const auto j = nlohmann::json::parse(out);
  for (const char* key :
       {"new_ids", "text", "prefill_tokens_per_second", "decode_tokens_per_second", "prompt_ids",
        "prefill_tokens", "decode_tokens", "peak_kv_cache_bytes", "peak_rss_bytes", "stopped_by", "device"})
    EXPECT_TRUE(j.contains(key)) << key;
  auto engine = engine::MoeEngine::open(demoModel());
  engine::GenerateOptions o;
  o.max_new_tokens = 7;
  o.stop_at_eos = false;
  EXPECT_EQ(j["new_ids"].get<std::vector<int32_t>>(),
            engine::generate(*engine, std::vector<int32_t>{1, 415, 2936}, o).new_ids);
  EXPECT_EQ(j["stopped_by"], "length");
  EXPECT_EQ(j["device"], "cpu");

  ASSERT_EQ(
      test::runCli(
          "generate --prompt 'Once upon a time' --max-new-tokens 4 --temperature 0.8 --top-p 0.9 --seed 3 "
          "--device cpu",
          &out, &err),
      0)
      << err;
  EXPECT_NE(out.find("decode"), std::string::npos) << out;
  EXPECT_NE(out.find("tokens/s"), std::string::npos) << out;
  EXPECT_NE(out.find("KV cache peak"), std::string::npos) << out;
}

TEST(GenerateCli, BadInputNamesTheOption) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"generate --prompt ''", "prompt is empty"},
      {"generate", "prompt is empty"},
      {"generate --ids 1,99999", "--ids"},
      {"generate --ids 1,x,3", "--ids"},
      {"generate --ids 1 --max-new-tokens 0", "--max-new-tokens"},
      {"generate --ids 1 --top-p 1.5", "--top-p"},
      {"generate --ids 1 --top-p 0", "--top-p"},
      {"generate --ids 1 --temperature 0", "--temperature"},
      {"generate --ids 1 --temperature -1 --top-p 0.5", "--temperature"},
      {"generate --ids 1 --greedy --temperature 0.7", "--greedy"},
      {"generate --ids 1 --prompt hello", "--prompt"},
  };
  for (const auto& [args, expected] : cases) {
    std::string out, err;
    EXPECT_NE(test::runCli(args, &out, &err), 0) << args;
    EXPECT_NE(err.find(expected), std::string::npos) << args << ": " << err;
  }
}

}  // namespace
}  // namespace moewb::jobs

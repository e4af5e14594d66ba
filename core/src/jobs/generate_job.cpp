// SPDX-License-Identifier: MIT
#include "moewb/jobs/generate_job.h"

#include <fmt/format.h>

#include <memory>

#include "moewb/engine/tokenizer.h"
#include "moewb/engine/variants.h"
#include "moewb/engine/weight_provider.h"
#include "moewb/error.h"
#include "moewb/process_memory.h"

namespace moewb::jobs {

nlohmann::json GenerateJobResult::toJson() const {
  nlohmann::json j = generation.toJson();
  j["model"] = model;
  j["model_type"] = model_type;
  j["variant"] = variant;
  j["batch"] = batch;
  j["peak_rss_bytes"] = peak_rss_bytes;
  return j;
}

GenerateJobResult runGenerateJob(const GenerateRequest& r, const ProgressFn& progress,
                                 const std::function<void(const std::string& text)>& on_text) {
  if (r.model.empty()) throw Error("generate: no model");
  const bool has_prompt = !r.prompt.empty(), has_ids = !r.ids.empty();
  if (has_prompt && has_ids) throw Error("generate: give --prompt or --ids, not both");
  if (!has_prompt && !has_ids)
    throw Error("generate: the prompt is empty (give --prompt TEXT or --ids ID,ID,...)");
  if (r.batch < 1) throw Error(fmt::format("generate: --batch is {}, expected at least 1", r.batch));
  engine::validate(r.options);

  auto engine = engine::MoeEngine::open(r.model);
  // Every decoding step reads the same weights again: their mapped pages stay resident instead of being
  // given back after each use as a single streaming pass does (the kernel still reclaims them, clean file
  // pages, when memory runs short). Halves the CPU time of a decoding step on tiny-mixtral.
  engine->setWeights(
      std::make_shared<engine::CheckpointWeights>(engine->checkpointPtr(), /*release_pages=*/false));
  const engine::ModelConfig& config = engine->config();
  for (int32_t id : r.ids)
    if (id < 0 || id >= config.vocab)
      throw Error(fmt::format("generate: --ids: token id {} is outside the model's vocabulary (0..{})", id,
                              config.vocab - 1));
  // The tokenizer turns a text prompt into ids, and the new ids into text (without one, --ids still runs).
  std::unique_ptr<engine::Tokenizer> tokenizer;
  std::vector<int32_t> prompt = r.ids;
  if (has_prompt) {
    tokenizer = engine::Tokenizer::forModel(r.model);
    prompt =
        engine::tokenizeForEvaluation(*tokenizer, r.prompt, r.no_bos ? std::nullopt : config.bos_token_id);
    if (prompt.empty()) throw Error("generate: --prompt gives no tokens");
  } else {
    try {
      tokenizer = engine::Tokenizer::forModel(r.model);
    } catch (const Error&) {
      tokenizer.reset();  // ids in, ids out
    }
  }

  GenerateJobResult result;
  result.model = engine->checkpoint().root();
  result.model_type = config.model_type;
  result.variant = "original";
  result.batch = r.batch;
  if (tokenizer) result.tokenizer = fmt::format("{} ({})", tokenizer->kind(), tokenizer->source());
  if (r.on_engine) r.on_engine(*engine);
  if (!r.quantized.empty()) {
    engine::WeightVariant v = engine::loadReplacementCheckpoint(engine->checkpointPtr(), r.quantized);
    engine->setWeights(v.weights);
    result.variant = v.label;
  }

  std::vector<int32_t> so_far;
  const engine::TokenFn on_token = [&](int sequence, int32_t id) {
    if (sequence != 0 || !on_text || !tokenizer) return;
    so_far.push_back(id);
    on_text(tokenizer->decode(so_far));
  };
  const std::vector<std::vector<int32_t>> prompts(static_cast<std::size_t>(r.batch), prompt);
  result.generation = engine::sequenceResult(
      engine::generateBatch(*engine, prompts, r.options, progress, tokenizer.get(), on_token), 0);
  result.peak_rss_bytes = peakResidentBytes();
  return result;
}

}  // namespace moewb::jobs

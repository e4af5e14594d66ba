// SPDX-License-Identifier: MIT
#pragma once
// Text generation as one request object: `moewb generate` and the GUI's "Try it" box build a
// GenerateRequest and run it through runGenerateJob with the same progress/cancel contract, so the prompt
// (text or ids), the variant (original or an export folder) and the options are resolved in one place.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "moewb/engine/engine.h"
#include "moewb/engine/generate.h"
#include "moewb/progress.h"

namespace moewb::jobs {

struct GenerateRequest {
  std::string model;  // checkpoint folder
  // The prompt: `prompt` (text, tokenized as [bos] + encode(prompt) with the model's tokenizer) or `ids`
  // (token ids used as given); exactly one.
  std::string prompt;
  std::vector<int32_t> ids;
  bool no_bos = false;
  // A compressed export (manifest.json) or dequantized checkpoint whose matrices replace the original's
  // (engine::loadReplacementCheckpoint, as `moewb eval --quantized`); "" for the original weights.
  std::string quantized;
  engine::GenerateOptions options;
  // The prompt decoded this many times together in one batch (batched decode throughput); results are
  // those of the first copy, the timings of the whole batch.
  int batch = 1;
  std::function<void(engine::MoeEngine&)> on_engine;  // called once the engine is open (the CLI's --device)
};

struct GenerateJobResult {
  std::string model;       // checkpoint root
  std::string model_type;  // config.json's model_type
  std::string variant;     // "original" or the export folder's label
  std::string tokenizer;   // "sentencepiece (…/tokenizer.model)", "" when the model has none usable
  int batch = 1;
  engine::GenerateResult generation;  // the first sequence; timings of the whole batch
  int64_t peak_rss_bytes = 0;         // the process's peak resident memory after the run
  // generation.toJson() plus {"model","model_type","variant","batch","peak_rss_bytes"}.
  nlohmann::json toJson() const;
};

// Checks the request (options, an empty prompt, ids outside the vocabulary: moewb::Error naming the option)
// before the weights are read, opens the model and the variant, tokenizes and generates. `on_text` sees the
// first sequence's text so far after every new token (when the model has a tokenizer). Returning false from
// `progress` throws moewb::Cancelled between two tokens.
GenerateJobResult runGenerateJob(const GenerateRequest& request, const ProgressFn& progress = {},
                                 const std::function<void(const std::string& text)>& on_text = {});

}  // namespace moewb::jobs

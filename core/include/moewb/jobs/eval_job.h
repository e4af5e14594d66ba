// SPDX-License-Identifier: MIT
#pragma once
// A perplexity evaluation as one request object: `moewb eval` and the GUI's perplexity view build an
// EvalRequest and run it through runEvalJob with the same progress/cancel contract, so the evaluation
// text, the protocol (windows, BOS) and the variants (original, exports, quick specs, an in-memory run)
// are resolved in one place.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moewb/engine/engine.h"
#include "moewb/engine/evaluate.h"
#include "moewb/progress.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/quant/rank_policy.h"

namespace moewb::jobs {

struct EvalRequest {
  std::string model;  // checkpoint folder
  // The text: `text` (a file, tokenized as [bos] + encode(file)) or `ids` (token ids file), not both.
  std::string text, ids;
  bool no_bos = false;
  // Also write the evaluated ids here (one per line), "" for none; written when every variant was
  // evaluated (a cancelled or failed run leaves no file). An existing non-empty file is replaced only with
  // `replace_existing` (--force), never one the run reads (moewb/output_target.h).
  std::string save_ids;
  bool replace_existing = false;
  engine::EvalOptions options;  // seq_len, max_windows (0: all), batch_tokens
  // The variants, evaluated in this order: the original weights, the in-memory run (labelled
  // `last_run_label`), each export folder (`moewb eval --quantized DIR`), each quick spec
  // (`--quantize rtn:3`, quantized just before its evaluation, with `frequencies` for frequency policies).
  bool original = true;
  std::shared_ptr<const quant::ModelQuantization> last_run;
  std::string last_run_label = "last run";
  std::vector<std::string> export_folders;
  std::vector<std::string> quick_specs;
  std::optional<quant::ExpertFrequencies> frequencies;
  // Called once the engine is open, before anything runs on it (the CLI installs its --device here).
  std::function<void(engine::MoeEngine&)> on_engine;
};

struct EvalVariantResult {
  std::string label;  // "original", the export folder's name, the spec, ...
  bool original = false;
  engine::PerplexityResult perplexity;
  uint64_t replaced_matrices = 0;
  uint64_t weight_bytes = 0;  // the model's weights as stored with the variant's matrices
};

struct EvalJobResult {
  std::string model;       // checkpoint root
  std::string model_type;  // config.json's model_type
  std::size_t ids = 0;     // tokens of the evaluated text
  std::vector<EvalVariantResult> variants;
};

// Checks the request (a quick spec is parsed before anything runs; nothing to evaluate is an error),
// opens the model, tokenizes, then builds each variant just before its evaluation and drops it after, so
// only one set of replacement matrices is in memory at once. `on_variant` sees each result as it
// completes. Progress: the variants share the fraction, a quick spec's quantization taking part of its
// share; stages name the variant. Returning false throws moewb::Cancelled.
EvalJobResult runEvalJob(const EvalRequest& request, const ProgressFn& progress = {},
                         const std::function<void(const EvalVariantResult&)>& on_variant = {});

}  // namespace moewb::jobs

// SPDX-License-Identifier: MIT
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moewb/checkpoint.h"
#include "moewb/engine/weight_provider.h"
#include "moewb/progress.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/quant/rank_policy.h"

namespace moewb::engine {

// A model variant to evaluate: the original weights or a set of replaced matrices.
struct WeightVariant {
  std::string label;                              // "original", "hqq:3", a directory name...
  std::shared_ptr<const WeightProvider> weights;  // nullptr: the checkpoint's own weights
  uint64_t stored_bytes = 0;                      // size of the variant's linear weights as stored
  uint64_t replaced_matrices = 0;
};

// Bytes of the whole model as stored with this variant: the checkpoint, minus what it stores for the
// tensors the variant replaces, plus the variant's own stored bytes (the memory `moewb eval` and the
// GUI's perplexity table report).
uint64_t storedModelBytes(const Checkpoint& original, const WeightVariant& variant);

// A variant from a directory: a compressed export of the quantizer (manifest.json beside safetensors
// shards: every quantized matrix is dequantized on load) or a dequantized export / any safetensors
// checkpoint (every tensor whose name and 2-D shape match a tensor of the original replaces it). Throws
// moewb::Error naming the directory when nothing matches.
WeightVariant loadReplacementCheckpoint(std::shared_ptr<const Checkpoint> original, const std::string& path);

// The in-memory result of quant::quantizeModel (the GUI's quantization jobs) as a variant: each quantized
// matrix dequantized (base plus compensators) replaces the original.
WeightVariant variantFromQuantization(std::shared_ptr<const Checkpoint> original,
                                      const quant::ModelQuantization& quantization, std::string label);

// Quantizes in memory with quant::quantizeModel (the matrices quant::isQuantizable selects) and
// dequantizes, for a quick spec of moewb/methods/spec.h: "rtn:3", "hqq:4:group=128", "milo:3:POLICY" with a
// rank policy in the syntax of moewb/quant/rank_policy.h ("uniform-16", "dense-64+sparse-16", "kurtosis-16",
// "frequency-16" — the last needs `frequencies`, e.g. from `moewb freq --json` on calibration text).
// Throws moewb::Error for a malformed spec or an unknown method.
WeightVariant quantizeVariant(std::shared_ptr<const Checkpoint> original, const std::string& spec,
                              const ProgressFn& progress = {},
                              const quant::ExpertFrequencies* frequencies = nullptr);

// Token ids for evaluation: --ids FILE when given, otherwise [bos] + encode(text of --text FILE) with the
// model's tokenizer (bos from config.json, omitted when it has none or `no_bos`).
std::vector<int32_t> loadEvaluationIds(const std::string& model_dir, const std::string& text_file,
                                       const std::string& ids_file, std::optional<int32_t> bos, bool no_bos);

}  // namespace moewb::engine

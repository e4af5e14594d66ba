// SPDX-License-Identifier: MIT
#pragma once
// Text generation with a KV cache: a prefill pass over the prompt, then one pass per new token, through
// MoeEngine::newDecodeState / extend only, so the same loop runs on the CPU engine and on a forward
// backend (the GPU) unchanged.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "moewb/engine/engine.h"
#include "moewb/progress.h"

namespace moewb::engine {

class Tokenizer;

// How the next token is chosen. Greedy takes the most likely token (the lowest id among equals, as
// torch.argmax). Sampling, in this order: the logits are divided by `temperature`; softmax (float64);
// top-p keeps the most likely tokens (ties by id) until their probability reaches `top_p` (at least one
// token); one uniform draw of a std::mt19937_64 seeded with `seed` picks a token from what is left, in
// proportion to its probability. Batched sequences draw in sequence order at every step.
struct GenerateOptions {
  int max_new_tokens = 64;
  bool greedy = true;
  double temperature = 1.0;  // > 0; sampling only
  double top_p = 1.0;        // (0, 1]; sampling only
  uint64_t seed = 0;
  // Stop a sequence when it produces an end-of-sequence token (kept as its last new id). eos_ids empty:
  // the model's (config.json's eos_token_id, every id of a list).
  bool stop_at_eos = true;
  std::vector<int32_t> eos_ids;
};
// Throws moewb::Error naming the option for a value out of range (max_new_tokens < 1, temperature <= 0,
// top_p outside (0, 1]).
void validate(const GenerateOptions& options);

enum class StopReason { Length, Eos };
const char* stopReasonName(StopReason reason);  // "length", "eos"

struct GeneratedSequence {
  std::vector<int32_t> prompt_ids, new_ids;
  std::string text;  // the new ids decoded, when a tokenizer was given
  StopReason stopped_by = StopReason::Length;
};

// Timings: the prefill pass runs every prompt token and gives the logits of the first new token; each
// decode pass runs the last new token of every sequence still going and gives the next one. So a
// sequence of k new tokens took part in k - 1 decode passes; decode_tokens counts the tokens those passes
// ran (sampling included in decode_seconds).
struct GenerationTimings {
  int64_t prefill_tokens = 0;
  double prefill_seconds = 0;
  int64_t decode_tokens = 0;
  double decode_seconds = 0;
  double prefillTokensPerSecond() const {
    return prefill_seconds > 0 ? double(prefill_tokens) / prefill_seconds : 0;
  }
  double decodeTokensPerSecond() const {
    return decode_seconds > 0 ? double(decode_tokens) / decode_seconds : 0;
  }
  uint64_t peak_kv_cache_bytes = 0;  // DecodeState::bytes() at its largest (after the last pass)
  // Loading the forward backend's weights (the GPU) and one warm-up pass over the prompts, before the
  // prefill clock starts (MoeEngine::prepareBackend); 0 on the CPU.
  double prepare_seconds = 0;
  int decode_steps = 0;
};

struct BatchGenerateResult {
  std::vector<GeneratedSequence> sequences;
  GenerationTimings timings;
};

// One sequence's result with the run's timings: what `moewb generate` prints.
struct GenerateResult {
  std::vector<int32_t> prompt_ids, new_ids;
  std::string text;
  StopReason stopped_by = StopReason::Length;
  GenerationTimings timings;
  // {"prompt_ids","new_ids","text","stopped_by","prefill_tokens","prefill_seconds",
  //  "prefill_tokens_per_second","decode_tokens","decode_seconds","decode_tokens_per_second",
  //  "peak_kv_cache_bytes"}
  nlohmann::json toJson() const;
};

// Sees each step's new tokens as they are chosen (sequence index, token id), on the calling thread: a GUI
// shows the text growing, a CLI could stream it.
using TokenFn = std::function<void(int sequence, int32_t id)>;

// Generates from each prompt (all decoded together: one prefill pass over every prompt, then one pass per
// step over the sequences still going). Prompts must be non-empty and ids inside the vocabulary.
// Progress: the prefill is the first tenth, then one report per step; a false return throws
// moewb::Cancelled between two passes (during the prefill, at the next layer). `tokenizer` (optional)
// decodes each sequence's new ids into its text.
BatchGenerateResult generateBatch(const MoeEngine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                  const GenerateOptions& options, const ProgressFn& progress = {},
                                  const Tokenizer* tokenizer = nullptr, const TokenFn& on_token = {});
GenerateResult generate(const MoeEngine& engine, std::span<const int32_t> prompt,
                        const GenerateOptions& options, const ProgressFn& progress = {},
                        const Tokenizer* tokenizer = nullptr, const TokenFn& on_token = {});
// Sequence `sequence` of a batch with the batch's timings.
GenerateResult sequenceResult(BatchGenerateResult batch, int sequence);

// The next token from one row of logits under `options` (greedy or temperature / top-p with `rng`).
class TokenSampler {
 public:
  explicit TokenSampler(const GenerateOptions& options);
  int32_t next(const float* logits, int64_t vocab);

 private:
  GenerateOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<double, int32_t>> scratch_;
};

// config.json's eos_token_id: every id when it is a list; empty when it has none.
std::vector<int32_t> modelEosIds(const Checkpoint& checkpoint);

}  // namespace moewb::engine

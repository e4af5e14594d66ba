// SPDX-License-Identifier: MIT
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "moewb/engine/engine.h"
#include "moewb/engine/expert_frequency.h"
#include "moewb/progress.h"

namespace moewb::engine {

// The reference protocol (../shared/models/tiny-mixtral/reference.json): non-overlapping windows of
// seq_len tokens from the start of the id stream, the tail dropped; every position but the first of a
// window is scored given its prefix in the window.
struct EvalOptions {
  int seq_len = 256;
  int max_windows = 0;          // 0: all windows
  int64_t batch_tokens = 8192;  // tokens per forward pass: the size of the activation buffer
};

// Window start offsets for `tokens` ids.
std::vector<int64_t> evaluationWindows(int64_t tokens, const EvalOptions& options);

struct PerplexityResult {
  double ppl = 0, nll = 0;  // exp(mean NLL), mean NLL (nats)
  int64_t tokens_scored = 0;
  int windows = 0;
  int64_t tokens_processed = 0;               // windows * seq_len
  double seconds = 0, tokens_per_second = 0;  // processed tokens per wall-clock second
  double prepare_seconds = 0;  // loading the forward backend's weights (the GPU) before the clock started
  ForwardStats stats;
  ExpertFrequency frequency;  // counted on the way
  nlohmann::json toJson() const;
};

// Perplexity over `ids` (use tokenizeForEvaluation for the protocol's [bos] + encode(text)). Throws
// moewb::Error when there is not even one window, Cancelled when the progress callback returns false.
PerplexityResult evaluatePerplexity(const MoeEngine& engine, std::span<const int32_t> ids,
                                    const EvalOptions& options, const ProgressFn& progress = {});

// Expert frequency only (skips the LM head).
ExpertFrequency measureExpertFrequency(const MoeEngine& engine, std::span<const int32_t> ids,
                                       const EvalOptions& options, const ProgressFn& progress = {});

}  // namespace moewb::engine

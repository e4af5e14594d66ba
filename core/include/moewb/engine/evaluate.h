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
  // Uncertainty: the mean NLL of each window (in order) and the standard error of the mean NLL over
  // windows (sample standard deviation / sqrt(windows); 0 with one window); the perplexity's standard error
  // by the delta method, ppl * nll_stderr. Windows, not tokens, are the independent samples: neighbouring
  // tokens' losses are correlated.
  std::vector<double> window_nll;
  double nll_stderr = 0, ppl_stderr = 0;
  ForwardStats stats;
  ExpertFrequency frequency;  // counted on the way
  nlohmann::json toJson() const;
};

// Two variants scored on the same windows (one evaluation run): the mean over windows of their NLL
// difference (variant - reference, nats per token) and its standard error. `significant` when the mean
// is more than two standard errors from zero (about 95%): otherwise the two cannot be told apart on
// this many windows, whichever perplexity is lower.
struct PairedNllDifference {
  double mean = 0, standard_error = 0;
  int windows = 0;
  bool significant = false;
  nlohmann::json toJson() const;  // {"delta_nll","delta_nll_stderr","windows","significant"}
};
// Throws moewb::Error when the two were not scored on the same number of windows.
PairedNllDifference pairedNllDifference(const PerplexityResult& variant, const PerplexityResult& reference);

// Perplexity over `ids` (use tokenizeForEvaluation for the protocol's [bos] + encode(text)). Throws
// moewb::Error when there is not even one window, Cancelled when the progress callback returns false.
PerplexityResult evaluatePerplexity(const MoeEngine& engine, std::span<const int32_t> ids,
                                    const EvalOptions& options, const ProgressFn& progress = {});

// Expert frequency only (skips the LM head).
ExpertFrequency measureExpertFrequency(const MoeEngine& engine, std::span<const int32_t> ids,
                                       const EvalOptions& options, const ProgressFn& progress = {});

}  // namespace moewb::engine

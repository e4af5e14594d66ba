// SPDX-License-Identifier: MIT
// Perplexity with its uncertainty: per-window mean NLL, the standard error over windows, and the paired
// comparison of two variants on the same windows (engine::pairedNllDifference).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "moewb/demo_model.h"
#include "moewb/engine/engine.h"
#include "moewb/engine/evaluate.h"
#include "moewb/engine/variants.h"
#include "moewb/error.h"

namespace moewb::engine {
namespace {

PerplexityResult withWindows(std::vector<double> w) {
  PerplexityResult r;
  r.window_nll = std::move(w);
  return r;
}

TEST(PerplexityUncertainty, WindowNllsAverageToTheNllAndGiveItsStandardError) {
  auto engine = MoeEngine::open(demoModelPath());
  const auto ids = loadEvaluationIds(demoModelPath(), demoModelPath() + "/../demo-text/sample.txt", "",
                                     engine->config().bos_token_id, false);
  EvalOptions options;
  options.seq_len = 64;
  options.max_windows = 12;
  options.batch_tokens = 5 * 64;  // windows split over batches of 5, 5 and 2
  const PerplexityResult r = evaluatePerplexity(*engine, ids, options);
  ASSERT_EQ(r.window_nll.size(), 12u);
  // Every window scores the same number of tokens, so the NLL is the mean of the window means.
  const double mean = std::accumulate(r.window_nll.begin(), r.window_nll.end(), 0.0) / 12.0;
  EXPECT_NEAR(mean, r.nll, 1e-12);
  // Independent formula: sqrt((sum x^2 - n mean^2) / (n - 1) / n) in long double.
  long double sx2 = 0;
  for (double x : r.window_nll) sx2 += static_cast<long double>(x) * x;
  const double se = static_cast<double>(std::sqrt((sx2 - 12.0L * mean * mean) / 11.0L / 12.0L));
  EXPECT_NEAR(r.nll_stderr, se, 1e-9);
  EXPECT_GT(r.nll_stderr, 0);
  EXPECT_NEAR(r.ppl_stderr, r.ppl * r.nll_stderr, 1e-12 * r.ppl);
}

TEST(PerplexityUncertainty, PairedDifferenceSeparatesAShiftFromNoise) {
  const auto ref = withWindows({2.0, 3.0, 2.5, 4.0});
  // The same windows: no difference, nothing significant.
  const auto same = pairedNllDifference(ref, ref);
  EXPECT_EQ(same.mean, 0.0);
  EXPECT_FALSE(same.significant);
  // Every window worse by 0.1 +- 0.01: significant although the windows themselves vary by ~1 nat.
  const auto shifted = pairedNllDifference(withWindows({2.11, 3.09, 2.6, 4.1}), ref);
  EXPECT_NEAR(shifted.mean, 0.1, 1e-12);
  EXPECT_TRUE(shifted.significant);
  // Differences that change sign: within the noise.
  const auto noisy = pairedNllDifference(withWindows({2.3, 2.8, 2.7, 3.8}), ref);
  EXPECT_FALSE(noisy.significant) << noisy.mean << " +- " << noisy.standard_error;
  EXPECT_THROW(pairedNllDifference(withWindows({1.0, 2.0}), ref), Error);
}

}  // namespace
}  // namespace moewb::engine

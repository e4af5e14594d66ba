// SPDX-License-Identifier: MIT
#include "moewb/engine/evaluate.h"

#include <fmt/format.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>

#include "moewb/error.h"
#include "moewb/parallel.h"

namespace moewb::engine {

std::vector<int64_t> evaluationWindows(int64_t tokens, const EvalOptions& options) {
  if (options.seq_len < 2)
    throw Error(fmt::format("--seq-len {} is too short (at least 2 tokens)", options.seq_len));
  std::vector<int64_t> starts;
  for (int64_t s = 0; s + options.seq_len <= tokens; s += options.seq_len) {
    if (options.max_windows > 0 && static_cast<int>(starts.size()) >= options.max_windows) break;
    starts.push_back(s);
  }
  return starts;
}

nlohmann::json PerplexityResult::toJson() const {
  return {{"ppl", ppl},
          {"nll", nll},
          {"tokens", tokens_scored},
          {"windows", windows},
          {"tokens_processed", tokens_processed},
          {"seconds", seconds},
          {"tokens_per_second", tokens_per_second},
          {"prepare_seconds", prepare_seconds},
          {"nll_stderr", nll_stderr},
          {"ppl_stderr", ppl_stderr},
          {"window_nll", window_nll},
          {"peak_activation_bytes", stats.peak_activation_bytes},
          {"peak_weight_bytes", stats.peak_weight_bytes},
          {"expert_frequency", frequency.toJson()}};
}

namespace {

// Counts top-k choices per MoE layer and, when scoring, accumulates the windows' cross-entropy.
class EvaluationObserver final : public ForwardObserver {
 public:
  EvaluationObserver(const ModelConfig& c, bool score) : score_(score) {
    freq.top_k = c.top_k;
    freq.num_experts = c.num_experts;
    for (int l = 0; l < c.layers; ++l)
      if (c.moe_layer[l]) freq.layers.push_back({l, std::vector<int64_t>(c.num_experts, 0)});
  }
  void startBatch(std::span<const int32_t> ids, int seq_len) {
    ids_ = ids;
    seq_len_ = seq_len;
    row_nll_.assign(ids.size(), 0.0);
    targets_.resize(ids.size());
    for (std::size_t r = 0; r < ids.size(); ++r)
      targets_[r] = static_cast<int>(r % seq_len) == seq_len - 1 ? -1 : ids[r + 1];
  }
  void finishBatch() {
    // Summed in row order, so the result does not depend on the thread count.
    double window_sum = 0;
    for (std::size_t r = 0; r < row_nll_.size(); ++r) {
      if (static_cast<int>(r % seq_len_) == seq_len_ - 1) {
        window_nll.push_back(window_sum / (seq_len_ - 1));
        window_sum = 0;
        continue;
      }
      nll_sum += row_nll_[r], ++scored;
      window_sum += row_nll_[r];
    }
  }
  void onRouting(const RoutingView& v) override {
    auto& counts = freq.layers.at(v.moe_index).counts;
    for (int64_t i = 0; i < v.tokens * v.top_k; ++i) ++counts[v.experts[i]];
  }
  bool wantsLogits() const override { return score_; }
  void onLogits(int64_t row_begin, int64_t rows, const float* logits, int64_t vocab) override {
    parallelFor(static_cast<std::size_t>((rows + 63) / 64), [&](std::size_t b) {
      for (int64_t r = static_cast<int64_t>(b) * 64; r < std::min<int64_t>(rows, (b + 1) * 64); ++r) {
        const int64_t row = row_begin + r;
        if (row % seq_len_ == seq_len_ - 1) continue;  // the window's last position predicts nothing scored
        Eigen::Map<const Eigen::ArrayXf> l(logits + r * vocab, vocab);
        // log-softmax: exp(l - max) <= 1 in float32 (vectorised, 1 ulp each), summed and logged in float64,
        // and the per-token losses are accumulated in float64 over ~1e5 tokens.
        const float mx = l.maxCoeff();
        const double sum = (l - mx).exp().cast<double>().sum();
        row_nll_[row] = std::log(sum) + static_cast<double>(mx) - static_cast<double>(l[ids_[row + 1]]);
      }
    });
  }

  const int32_t* targets() const override { return score_ ? targets_.data() : nullptr; }
  void onTokenNll(int64_t row_begin, int64_t rows, const double* nll) override {
    std::copy(nll, nll + rows, row_nll_.begin() + row_begin);
  }

  ExpertFrequency freq;
  double nll_sum = 0;
  int64_t scored = 0;
  std::vector<double> window_nll;

 private:
  bool score_;
  std::span<const int32_t> ids_;
  int seq_len_ = 0;
  std::vector<double> row_nll_;
  std::vector<int32_t> targets_;  // the id each row predicts, -1 for a window's last row
};

struct RunTotals {
  ForwardStats stats;
  int windows = 0;
  double seconds = 0, prepare_seconds = 0;
};

RunTotals runWindows(const MoeEngine& engine, std::span<const int32_t> ids, const EvalOptions& options,
                     EvaluationObserver& observer, const ProgressFn& progress_fn, const char* what) {
  auto starts = evaluationWindows(static_cast<int64_t>(ids.size()), options);
  if (starts.empty())
    throw Error(fmt::format("the text has {} tokens, fewer than one window of --seq-len {}", ids.size(),
                            options.seq_len));
  const int per_batch = static_cast<int>(std::max<int64_t>(1, options.batch_tokens / options.seq_len));
  ProgressReporter reporter(progress_fn ? progress_fn
                                        : ProgressFn([](double, std::string_view) { return true; }));
  RunTotals totals;
  totals.windows = static_cast<int>(starts.size());
  {
    SequenceBatch first;
    for (std::size_t w = 0; w < std::min<std::size_t>(starts.size(), per_batch); ++w)
      first.add(ids.subspan(starts[w], options.seq_len));
    totals.prepare_seconds = engine.prepareBackend(&first);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t b = 0; b < starts.size(); b += per_batch) {
    const std::size_t e = std::min(starts.size(), b + per_batch);
    SequenceBatch batch;
    for (std::size_t w = b; w < e; ++w) batch.add(ids.subspan(starts[w], options.seq_len));
    observer.startBatch(batch.ids, options.seq_len);
    const double begin = static_cast<double>(b) / starts.size(),
                 span = static_cast<double>(e - b) / starts.size();
    if (!reporter.report(begin, fmt::format("{} windows {}-{} of {}", what, b + 1, e, starts.size())))
      throw Cancelled{};
    auto stats = engine.forward(batch, observer, &reporter, begin, span);
    observer.finishBatch();
    totals.stats.peak_activation_bytes =
        std::max(totals.stats.peak_activation_bytes, stats.peak_activation_bytes);
    totals.stats.peak_weight_bytes = std::max(totals.stats.peak_weight_bytes, stats.peak_weight_bytes);
    totals.stats.kv_stored_bits += stats.kv_stored_bits;
    totals.stats.kv_elements += stats.kv_elements;
  }
  totals.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  reporter.report(1.0, "done");
  observer.freq.tokens = static_cast<int64_t>(starts.size()) * options.seq_len;
  return totals;
}

// Sample standard deviation / sqrt(n) in float64 (two passes); 0 for fewer than two values.
double standardErrorOfMean(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1) / static_cast<double>(v.size()));
}

}  // namespace

nlohmann::json PairedNllDifference::toJson() const {
  return {{"delta_nll", mean}, {"delta_nll_stderr", standard_error}, {"windows", windows}, {"significant", significant}};
}

PairedNllDifference pairedNllDifference(const PerplexityResult& variant, const PerplexityResult& reference) {
  if (variant.window_nll.size() != reference.window_nll.size() || variant.window_nll.empty())
    throw Error(fmt::format("a paired perplexity comparison needs the same windows: {} vs {}",
                            variant.window_nll.size(), reference.window_nll.size()));
  std::vector<double> diff(variant.window_nll.size());
  for (std::size_t w = 0; w < diff.size(); ++w) diff[w] = variant.window_nll[w] - reference.window_nll[w];
  PairedNllDifference d;
  d.windows = static_cast<int>(diff.size());
  for (double x : diff) d.mean += x;
  d.mean /= static_cast<double>(diff.size());
  d.standard_error = standardErrorOfMean(diff);
  d.significant = diff.size() >= 2 && std::abs(d.mean) > 2 * d.standard_error;
  return d;
}

PerplexityResult evaluatePerplexity(const MoeEngine& engine, std::span<const int32_t> ids,
                                    const EvalOptions& options, const ProgressFn& progress) {
  EvaluationObserver observer(engine.config(), true);
  auto totals = runWindows(engine, ids, options, observer, progress, "perplexity");
  PerplexityResult r;
  r.windows = totals.windows;
  r.tokens_scored = observer.scored;
  r.tokens_processed = static_cast<int64_t>(totals.windows) * options.seq_len;
  r.nll = observer.nll_sum / static_cast<double>(observer.scored);
  r.ppl = std::exp(r.nll);
  r.window_nll = std::move(observer.window_nll);
  r.nll_stderr = standardErrorOfMean(r.window_nll);
  r.ppl_stderr = r.ppl * r.nll_stderr;
  r.seconds = totals.seconds;
  r.prepare_seconds = totals.prepare_seconds;
  r.tokens_per_second = totals.seconds > 0 ? r.tokens_processed / totals.seconds : 0;
  r.stats = totals.stats;
  r.frequency = std::move(observer.freq);
  return r;
}

ExpertFrequency measureExpertFrequency(const MoeEngine& engine, std::span<const int32_t> ids,
                                       const EvalOptions& options, const ProgressFn& progress) {
  EvaluationObserver observer(engine.config(), false);
  runWindows(engine, ids, options, observer, progress, "routing");
  return std::move(observer.freq);
}

}  // namespace moewb::engine

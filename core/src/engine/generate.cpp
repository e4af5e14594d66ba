// SPDX-License-Identifier: MIT
#include "moewb/engine/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "moewb/engine/tokenizer.h"
#include "moewb/error.h"

namespace moewb::engine {

namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The head's last row of each sequence (lastLogitsOnly: onLogits rows are sequence indices).
class LastLogits final : public ForwardObserver {
 public:
  LastLogits(int sequences, int64_t vocab)
      : vocab_(vocab), rows_(static_cast<std::size_t>(sequences) * vocab) {}
  bool lastLogitsOnly() const override { return true; }
  void onLogits(int64_t row_begin, int64_t rows, const float* logits, int64_t vocab) override {
    std::copy(logits, logits + rows * vocab, rows_.begin() + row_begin * vocab_);
  }
  const float* row(int sequence) const { return rows_.data() + sequence * vocab_; }

 private:
  int64_t vocab_;
  std::vector<float> rows_;
};

}  // namespace

void validate(const GenerateOptions& o) {
  if (o.max_new_tokens < 1)
    throw Error(fmt::format("generate: --max-new-tokens is {}, expected at least 1", o.max_new_tokens));
  if (o.greedy) return;
  if (!(o.temperature > 0) || !std::isfinite(o.temperature))
    throw Error(
        fmt::format("generate: --temperature is {}, expected a number > 0 (or --greedy)", o.temperature));
  if (!(o.top_p > 0 && o.top_p <= 1))
    throw Error(fmt::format("generate: --top-p is {}, expected a number in (0, 1]", o.top_p));
}

const char* stopReasonName(StopReason reason) {
  return reason == StopReason::Eos ? "eos" : "length";
}

std::vector<int32_t> modelEosIds(const Checkpoint& checkpoint) {
  const auto& config = checkpoint.config();
  const auto it = config.find("eos_token_id");
  std::vector<int32_t> ids;
  if (it == config.end()) return ids;
  auto add = [&](const nlohmann::json& v) {
    if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
  };
  if (it->is_array())
    for (const auto& v : *it) add(v);
  else
    add(*it);
  return ids;
}

TokenSampler::TokenSampler(const GenerateOptions& options) : options_(options), rng_(options.seed) {
  validate(options_);
}

int32_t TokenSampler::next(const float* logits, int64_t vocab) {
  if (options_.greedy) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  // Temperature, then softmax in float64.
  scratch_.resize(static_cast<std::size_t>(vocab));
  const double inv_t = 1.0 / options_.temperature;
  double mx = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, double(logits[i]) * inv_t);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double p = std::exp(double(logits[i]) * inv_t - mx);
    scratch_[i] = {p, static_cast<int32_t>(i)};
    sum += p;
  }
  // Top-p: most likely first (lower id first among equals); keep tokens while the ones before them hold
  // less than top_p of the probability (HF's TopPLogitsWarper keeps the same set).
  std::sort(scratch_.begin(), scratch_.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::size_t keep = 0;
  double kept = 0;
  while (keep < scratch_.size() && (keep == 0 || kept < options_.top_p * sum)) kept += scratch_[keep++].first;
  // One draw over the kept tokens, in proportion to their probability.
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * kept;
  double acc = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    acc += scratch_[i].first;
    if (u < acc) return scratch_[i].second;
  }
  return scratch_[keep - 1].second;  // u rounded up to `kept`
}

BatchGenerateResult generateBatch(const MoeEngine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                  const GenerateOptions& options, const ProgressFn& progress,
                                  const Tokenizer* tokenizer, const TokenFn& on_token) {
  validate(options);
  if (prompts.empty()) throw Error("generate: no prompt");
  const ModelConfig& config = engine.config();
  for (std::size_t s = 0; s < prompts.size(); ++s) {
    if (prompts[s].empty()) throw Error(fmt::format("generate: prompt {} has no tokens", s + 1));
    for (int32_t id : prompts[s])
      if (id < 0 || id >= config.vocab)
        throw Error(
            fmt::format("generate: token id {} of prompt {} is outside the model's vocabulary (0..{})", id,
                        s + 1, config.vocab - 1));
  }
  const std::vector<int32_t> eos =
      options.eos_ids.empty() ? modelEosIds(engine.checkpoint()) : options.eos_ids;
  auto isEos = [&](int32_t id) {
    return options.stop_at_eos && std::find(eos.begin(), eos.end(), id) != eos.end();
  };

  const int S = static_cast<int>(prompts.size());
  BatchGenerateResult result;
  result.sequences.resize(prompts.size());
  for (int s = 0; s < S; ++s) result.sequences[s].prompt_ids = prompts[s];
  std::vector<bool> going(prompts.size(), true);
  TokenSampler sampler(options);
  LastLogits logits(S, config.vocab);
  std::unique_ptr<DecodeState> state = engine.newDecodeState(S);
  GenerationTimings& timings = result.timings;

  // Picks every running sequence's next token from the last pass's logits; false when none is left.
  auto choose = [&]() {
    bool any = false;
    for (int s = 0; s < S; ++s) {
      if (!going[s]) continue;
      GeneratedSequence& seq = result.sequences[s];
      const int32_t id = sampler.next(logits.row(s), config.vocab);
      seq.new_ids.push_back(id);
      if (on_token) on_token(s, id);
      if (isEos(id)) {
        seq.stopped_by = StopReason::Eos;
        going[s] = false;
      } else if (static_cast<int>(seq.new_ids.size()) >= options.max_new_tokens) {
        seq.stopped_by = StopReason::Length;
        going[s] = false;
      }
      any = any || going[s];
    }
    return any;
  };
  auto report = [&](double fraction, const std::string& stage) {
    if (progress && !progress(fraction, stage)) throw Cancelled{};
  };

  // Prefill: every prompt in one pass; a cancel is seen at the next layer.
  constexpr double kPrefillShare = 0.1;
  {
    SequenceBatch batch;
    for (const auto& p : prompts) batch.add(p);
    ProgressReporter prefill_progress([&](double f, std::string_view stage) {
      return !progress || progress(kPrefillShare * f, "prefill: " + std::string(stage));
    });
    timings.prepare_seconds = engine.prepareBackend(&batch);
    const auto start = Clock::now();
    engine.extend(*state, batch, logits, progress ? &prefill_progress : nullptr);
    bool any = choose();
    timings.prefill_seconds = secondsSince(start);
    timings.prefill_tokens = batch.tokens();
    timings.peak_kv_cache_bytes = state->bytes();
    report(kPrefillShare, "prefill done");
    // Decode: the last new token of each running sequence; finished sequences get none.
    const auto decode_start = Clock::now();
    while (any) {
      SequenceBatch step;
      for (int s = 0; s < S; ++s) {
        if (going[s])
          step.add(std::span<const int32_t>(&result.sequences[s].new_ids.back(), 1));
        else
          step.add({});
      }
      engine.extend(*state, step, logits);
      timings.decode_tokens += step.tokens();
      ++timings.decode_steps;
      timings.peak_kv_cache_bytes = std::max(timings.peak_kv_cache_bytes, state->bytes());
      any = choose();
      std::size_t longest = 0;
      for (const auto& seq : result.sequences) longest = std::max(longest, seq.new_ids.size());
      report(kPrefillShare + (1 - kPrefillShare) * double(longest) / options.max_new_tokens,
             fmt::format("token {}/{}", longest, options.max_new_tokens));
    }
    timings.decode_seconds = secondsSince(decode_start);
  }
  if (tokenizer)
    for (auto& seq : result.sequences) seq.text = tokenizer->decode(seq.new_ids);
  return result;
}

GenerateResult sequenceResult(BatchGenerateResult batch, int sequence) {
  GeneratedSequence& seq = batch.sequences.at(static_cast<std::size_t>(sequence));
  GenerateResult r;
  r.prompt_ids = std::move(seq.prompt_ids);
  r.new_ids = std::move(seq.new_ids);
  r.text = std::move(seq.text);
  r.stopped_by = seq.stopped_by;
  r.timings = batch.timings;
  return r;
}

GenerateResult generate(const MoeEngine& engine, std::span<const int32_t> prompt,
                        const GenerateOptions& options, const ProgressFn& progress,
                        const Tokenizer* tokenizer, const TokenFn& on_token) {
  return sequenceResult(generateBatch(engine, {std::vector<int32_t>(prompt.begin(), prompt.end())}, options,
                                      progress, tokenizer, on_token),
                        0);
}

nlohmann::json GenerateResult::toJson() const {
  return {{"prompt_ids", prompt_ids},
          {"new_ids", new_ids},
          {"text", text},
          {"stopped_by", stopReasonName(stopped_by)},
          {"prepare_seconds", timings.prepare_seconds},
          {"prefill_tokens", timings.prefill_tokens},
          {"prefill_seconds", timings.prefill_seconds},
          {"prefill_tokens_per_second", timings.prefillTokensPerSecond()},
          {"decode_tokens", timings.decode_tokens},
          {"decode_seconds", timings.decode_seconds},
          {"decode_tokens_per_second", timings.decodeTokensPerSecond()},
          {"peak_kv_cache_bytes", timings.peak_kv_cache_bytes}};
}

}  // namespace moewb::engine

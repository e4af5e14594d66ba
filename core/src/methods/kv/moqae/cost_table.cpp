// SPDX-License-Identifier: MIT
// MoQAE's cost table: what each configuration costs in each chunk, measured once with the LLM frozen
// (moewb/methods/moqae_training.h explains why a table instead of a forward pass per training step).
#include <fmt/format.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>

#include "moewb/engine/evaluate.h"
#include "moewb/engine/kv_cache.h"
#include "moewb/error.h"
#include "moewb/methods/moqae_training.h"
#include "moewb/methods/registry.h"
#include "moewb/parallel.h"

namespace moewb::methods::moqae {

namespace {

// One sequence of a measuring batch: window `window` with one (group, chunk) stored in configuration
// `config`, or every chunk fp16 (config < 0).
struct Variant {
  int window = 0, group = 0, config = -1;
  std::size_t routed_index = 0;  // index into CostTable::routed_chunks
};

class PerturbationPolicy final : public engine::KvCachePolicy {
 public:
  PerturbationPolicy(const RouterSet& set, const CostTable& table, const std::vector<Variant>& batch)
      : set_(set), table_(table), batch_(batch) {
    const KvMethod& half = MethodRegistry::instance().getKv("fp16", "moqae");
    fp16_ = {&half, half.defaults()};
  }
  int chunkTokens() const override { return set_.chunk_tokens; }
  const KvFormat& formatFor(const engine::KvChunkContext& c) const override {
    const Variant& v = batch_[static_cast<std::size_t>(c.sequence)];
    if (v.config >= 0 && c.layer / set_.share == v.group && c.chunk == table_.routed_chunks[v.routed_index])
      return set_.configs[static_cast<std::size_t>(v.config)].format;
    return fp16_;
  }
  std::string label() const override { return "moqae cost table"; }

 private:
  const RouterSet& set_;
  const CostTable& table_;
  const std::vector<Variant>& batch_;
  KvFormat fp16_;
};

// Per-row NLL of a batch of windows, and the routing layers' key features of the fp16 sequences.
class CostObserver final : public engine::ForwardObserver {
 public:
  CostObserver(const RouterSet& set, CostTable& table, const std::vector<Variant>& batch, std::span<const int32_t> ids,
               int seq_len)
      : set_(set), table_(table), batch_(batch), ids_(ids), seq_len_(seq_len), row_nll_(ids.size(), 0.0) {
    targets_.resize(ids.size());
    for (std::size_t r = 0; r < ids.size(); ++r)
      targets_[r] = static_cast<int>(r % seq_len) == seq_len - 1 ? -1 : ids[r + 1];
  }
  bool wantsKeysValues() const override { return true; }
  void onKeysValues(const engine::KeyValueView& kv) override {
    const Variant& v = batch_[static_cast<std::size_t>(kv.sequence)];
    if (v.config >= 0 || kv.layer % set_.share != 0) return;
    const int g = kv.layer / set_.share;
    for (std::size_t c = 0; c < table_.routed_chunks.size(); ++c) {
      const int64_t row = table_.routed_chunks[c] * set_.chunk_tokens;
      table_.features[table_.item(v.window, g, c)] = chunkFeatures(
          kv.keys + row * kv.key_row_stride, set_.chunk_tokens, kv.kv_heads, kv.key_dim, kv.key_row_stride, 1.0);
    }
  }
  void onLogits(int64_t row_begin, int64_t rows, const float* logits, int64_t vocab) override {
    parallelFor(static_cast<std::size_t>(rows), [&](std::size_t i) {
      const int64_t row = row_begin + static_cast<int64_t>(i);
      if (targets_[row] < 0) return;
      Eigen::Map<const Eigen::ArrayXf> l(logits + static_cast<int64_t>(i) * vocab, vocab);
      const float mx = l.maxCoeff();
      row_nll_[row] = std::log((l - mx).exp().cast<double>().sum()) + mx - l[targets_[row]];
    });
  }
  const int32_t* targets() const override { return targets_.data(); }
  void onTokenNll(int64_t row_begin, int64_t rows, const double* nll) override {
    std::copy(nll, nll + rows, row_nll_.begin() + row_begin);
  }
  // Mean NLL of sequence s (its scored rows).
  double meanNll(int s) const {
    double sum = 0;
    for (int t = 0; t < seq_len_ - 1; ++t) sum += row_nll_[static_cast<std::size_t>(s) * seq_len_ + t];
    return sum / (seq_len_ - 1);
  }

 private:
  const RouterSet& set_;
  CostTable& table_;
  const std::vector<Variant>& batch_;
  std::span<const int32_t> ids_;
  int seq_len_;
  std::vector<double> row_nll_;
  std::vector<int32_t> targets_;
};

}  // namespace

CostTable measureCostTable(const engine::MoeEngine& engine, std::span<const int32_t> ids, const RouterSet& set,
                           const CostTableOptions& options, const ProgressFn& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  if (options.seq_len < set.chunk_tokens * 2)
    throw Error(fmt::format("moqae: --seq-len {} holds fewer than two chunks of {} tokens", options.seq_len,
                            set.chunk_tokens));
  engine::EvalOptions eval;
  eval.seq_len = options.seq_len;
  const std::vector<int64_t> starts = engine::evaluationWindows(int64_t(ids.size()), eval);
  if (starts.empty())
    throw Error(fmt::format("moqae: the calibration text has {} tokens, fewer than one window of --seq-len {}",
                            ids.size(), options.seq_len));
  const int windows = std::min<int>(std::max(1, options.windows), static_cast<int>(starts.size()));
  CostTable table;
  table.windows = windows;
  table.groups = set.groups();
  table.configs = set.configCount();
  table.chunks_per_window = options.seq_len / set.chunk_tokens;
  for (int64_t c = set.freeze ? 1 : 0; c < table.chunks_per_window; ++c) table.routed_chunks.push_back(c);
  const std::size_t routed = table.routed_chunks.size();
  table.base_nll.assign(static_cast<std::size_t>(windows), 0.0);
  table.delta.assign(std::size_t(windows) * table.groups * routed * table.configs, 0.0);
  table.features.resize(std::size_t(windows) * table.groups * routed);

  // Every variant of every window; fp16 configurations cost nothing by definition (the base is fp16).
  std::vector<Variant> variants;
  for (int w = 0; w < windows; ++w) {
    variants.push_back({w, 0, -1, 0});
    for (int g = 0; g < table.groups; ++g)
      for (std::size_t c = 0; c < routed; ++c)
        for (int j = 0; j < table.configs; ++j)
          if (set.configs[j].format.method->name() != "fp16") variants.push_back({w, g, j, c});
  }
  // Windows spread evenly over the text, so a short table still sees all of it.
  auto windowStart = [&](int w) { return starts[std::size_t(w) * starts.size() / std::size_t(windows)]; };
  const std::size_t per_pass = std::max<std::size_t>(1, std::size_t(options.batch_tokens / options.seq_len));
  ProgressReporter reporter(progress ? progress : ProgressFn([](double, std::string_view) { return true; }));
  std::vector<double> nll(variants.size(), 0.0);
  // A private engine view with the perturbation policies: the caller's engine keeps its own policy.
  engine::MoeEngine view(engine.checkpointPtr(), engine.weightsPtr());
  view.setLinearBackend(engine.linearBackend());
  for (std::size_t b = 0; b < variants.size(); b += per_pass) {
    const std::vector<Variant> batch_variants(variants.begin() + b,
                                              variants.begin() + std::min(variants.size(), b + per_pass));
    engine::SequenceBatch batch;
    for (const Variant& v : batch_variants) batch.add(ids.subspan(windowStart(v.window), options.seq_len));
    const double begin = double(b) / variants.size(), span = double(batch_variants.size()) / variants.size();
    if (!reporter.report(begin, fmt::format("cost table: {} of {} window variants", b, variants.size())))
      throw Cancelled{};
    view.setKvCachePolicy(std::make_shared<PerturbationPolicy>(set, table, batch_variants));
    CostObserver observer(set, table, batch_variants, batch.ids, options.seq_len);
    view.forward(batch, observer, &reporter, begin, span);
    for (std::size_t i = 0; i < batch_variants.size(); ++i) nll[b + i] = observer.meanNll(static_cast<int>(i));
  }
  for (std::size_t i = 0; i < variants.size(); ++i)
    if (variants[i].config < 0) table.base_nll[static_cast<std::size_t>(variants[i].window)] = nll[i];
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const Variant& v = variants[i];
    if (v.config >= 0)
      table.delta[table.item(v.window, v.group, v.routed_index) * table.configs + v.config] =
          nll[i] - table.base_nll[static_cast<std::size_t>(v.window)];
  }
  reporter.report(1.0, "cost table done");
  table.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return table;
}

}  // namespace moewb::methods::moqae

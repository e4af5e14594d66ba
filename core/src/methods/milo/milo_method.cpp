// SPDX-License-Identifier: MIT
// MiLo: HQQ codes plus low-rank compensators U V of the residual, ranks from a rank policy, factors
// stored in INT3 (or int8/fp16/fp32) (moewb/quant/milo.h). Its loop can run on a BatchBackend.
#include "moewb/quant/milo.h"

#include <string>

#include "moewb/methods/weight_method.h"
#include "../grouped/grouped_codes.h"

namespace moewb::methods {
namespace {

std::vector<OptionSpec> miloOptions() {
  std::vector<OptionSpec> options = grouped::codeOptions();
  OptionSpec iters{.name = "max-iters",
                   .type = OptionType::Integer,
                   .label = "MiLo iterations (max)",
                   .help = "MiLo iterations at most",
                   .default_value = "20",
                   .min = 1,
                   .max = 1000};
  iters.read = [](const quant::QuantizeSettings& s) { return std::to_string(s.milo.max_iters); };
  iters.write = [](quant::QuantizeSettings& s, const std::string& v) { s.milo.max_iters = std::stoi(v); };
  OptionSpec compensator{.name = "compensator",
                         .type = OptionType::Choice,
                         .label = "Compensator storage",
                         .help = "How U and V are stored",
                         .default_value = "int3",
                         .choices = {"int3", "int8", "fp16", "fp32"}};
  compensator.read = [](const quant::QuantizeSettings& s) {
    return std::string(quant::compensatorFormatName(s.milo.compensator));
  };
  compensator.write = [](quant::QuantizeSettings& s, const std::string& v) {
    s.milo.compensator = *quant::parseCompensatorFormat(v);
  };
  OptionSpec svd{.name = "svd",
                 .type = OptionType::Choice,
                 .label = "Truncated SVD",
                 .help = "Truncated SVD of the residual: exact or randomized (seeded)",
                 .default_value = "exact",
                 .choices = {"exact", "randomized"}};
  svd.read = [](const quant::QuantizeSettings& s) {
    return std::string(s.milo.svd.method == quant::SvdMethod::Exact ? "exact" : "randomized");
  };
  svd.write = [](quant::QuantizeSettings& s, const std::string& v) {
    s.milo.svd.method = v == "exact" ? quant::SvdMethod::Exact : quant::SvdMethod::Randomized;
  };
  options.push_back(iters);
  options.push_back(compensator);
  options.push_back(svd);
  return options;
}

class MiloMethod final : public WeightMethod {
 public:
  std::string_view name() const override { return "milo"; }
  std::string_view title() const override { return "MiLo (HQQ + low-rank compensators, ranks from the policy)"; }
  std::string_view summary() const override {
    return "HQQ plus INT3 low-rank compensators of the residual, ranks from a rank policy (--policy, --budget)";
  }
  const std::vector<OptionSpec>& options() const override { return options_; }
  std::vector<std::string> specPositionals() const override { return {"bits", "policy"}; }
  bool usesRankPolicy() const override { return true; }
  bool runsOnGpu() const override { return true; }
  void validate(const quant::QuantizeSettings& s) const override { quant::validateSettings(s.grouped); }
  PredictedSize predictedSize(const quant::QuantizeSettings& s, int64_t rows, int64_t cols,
                              int rank) const override {
    return {grouped::baseBytes(s, rows, cols),
            quant::compensatorBytes(rows, cols, rank, s.milo.compensator, s.milo.compensator_group)};
  }

  quant::ComputedMatrix compute(const MatrixRM& w, const quant::QuantizeSettings& s, int rank,
                                uint64_t seed, int threads, const IterationCallback& on_iteration) const override {
    quant::MiloOptions o = s.milo;
    o.rank = rank;
    o.svd.seed = seed;
    quant::MiloIterate it = quant::miloIterate(w, s.grouped, o, threads, on_iteration);
    quant::ComputedMatrix c;
    c.base = std::move(it.base);
    c.u = std::move(it.u);
    c.v = std::move(it.v);
    c.curve = std::move(it.curve);
    c.best_iteration = it.best_iteration;
    return c;
  }

  quant::QuantizedMatrix storeComputed(const MatrixRM& w, const quant::QuantizeSettings& s, int rank,
                                       quant::ComputedMatrix&& c) const override {
    quant::MiloOptions o = s.milo;
    o.rank = rank;
    quant::MiloIterate it;
    it.base = std::move(c.base);
    it.u = rank > 0 ? std::move(c.u) : MatrixRM(w.rows(), 0);
    it.v = rank > 0 ? std::move(c.v) : MatrixRM(0, w.cols());
    it.curve = std::move(c.curve);
    if (it.curve.empty()) {
      // A backend that keeps no history (a rank-0 MiLo is a single HQQ): measure the kept iterate.
      MatrixRM approx = quant::dequantize(it.base);
      if (rank > 0) approx.noalias() += it.u * it.v;
      it.curve.push_back(quant::relativeError(w, approx));
    }
    it.best_iteration = c.best_iteration >= 0 && c.best_iteration < int(it.curve.size())
                            ? c.best_iteration
                            : int(it.curve.size()) - 1;
    it.error = it.curve[std::size_t(it.best_iteration)];
    quant::MiloResult r = quant::storeMiloIterate(w, std::move(it), o);
    quant::QuantizedMatrix q;
    q.method = s.method;
    q.source.rows = w.rows();
    q.source.cols = w.cols();
    q.base = std::move(r.base);
    q.rank = rank;
    if (rank > 0) {
      q.u = std::move(r.u);
      q.v = std::move(r.v);
      q.compensator_bytes = quant::storedBytes(*q.u) + quant::storedBytes(*q.v);
    }
    q.curve = std::move(r.curve);
    q.rel_error = r.error;
    q.rel_error_float_compensators = r.error_unquantized_compensators;
    q.kurtosis = quant::excessKurtosis(w);
    q.bytes = quant::storedBytes(q.base) + q.compensator_bytes;
    return q;
  }

  quant::QuantizedMatrix quantize(const MatrixRM& w, const quant::QuantizeSettings& s, int rank,
                                  uint64_t seed, int threads, const IterationCallback& cb,
                                  const quant::MatrixHessian*) const override {
    return storeComputed(w, s, rank, compute(w, s, rank, seed, threads, cb));
  }
  nlohmann::json settingsJson(const quant::QuantizeSettings& s) const override { return grouped::settingsJson(s); }

 private:
  std::vector<OptionSpec> options_ = miloOptions();
};

}  // namespace

std::unique_ptr<WeightMethod> makeMiloMethod() { return std::make_unique<MiloMethod>(); }

}  // namespace moewb::methods

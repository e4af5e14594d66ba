// SPDX-License-Identifier: MIT
// qmoe-ternary: QMoE's ternary code made with GPTQ. Each row's weights become {lo, 0, hi} =
// {alpha * min, 0, alpha * max} of the row (alpha per row, chosen by the diag-H-weighted rounding error),
// rounded column by column with GPTQ's error feedback (../gptq/gptq_solver.h).
//
// Stored form: the dictionary payload (moewb/quant/payloads/ternary_dictionary.h) with a fixed
// *uniform* dictionary: every sequence of 5 ternary pairs (9^5 = 59049 codewords) plus every sequence
// of 1 to 3 pairs for row tails, 59868 in all. That holds lo and hi per row exactly (fp16), which grouped
// 2-bit codes cannot (their levels are evenly spaced, so {lo, 0, hi} fits only when hi / -lo is 1, 2
// or 1/2), and costs 16 bits per 10 weights = 1.6 bits per weight (log2 3 = 1.585 is the bound for
// codes without structure), plus the dictionary once per export (479 kB). The sub-1-bit method
// (qmoe-sub1) replaces this dictionary with one built from the codes' statistics; the codes, the row
// values and the payload are the same.
#include <fmt/format.h>

#include <array>
#include <cmath>

#include "../builtin_methods.h"
#include "../gptq/gptq_method_common.h"
#include "../gptq/gptq_solver.h"
#include "moewb/error.h"
#include "moewb/quant/payloads/ternary_dictionary.h"

namespace moewb::methods {
namespace {

constexpr int kWordPairs = 5;

std::shared_ptr<const quant::TernaryDictionary> uniformDictionary() {
  static const std::shared_ptr<const quant::TernaryDictionary> dictionary = [] {
    std::vector<std::vector<uint8_t>> entries;
    for (int length : {kWordPairs, 1, 2, 3}) {
      int count = 1;
      for (int i = 0; i < length; ++i) count *= 9;
      for (int v = 0; v < count; ++v) {
        std::vector<uint8_t> word(static_cast<std::size_t>(length));
        for (int i = length - 1, x = v; i >= 0; --i, x /= 9) word[std::size_t(i)] = uint8_t(x % 9);
        entries.push_back(std::move(word));
      }
    }
    return std::make_shared<const quant::TernaryDictionary>(entries, "uniform ternary dictionary");
  }();
  return dictionary;
}

// u16 indices a row of `cols` weights takes with the uniform dictionary (greedy longest match: 5-pair
// words, then a tail of 1..3 pairs, or 3 + 1 for a tail of 4).
int64_t wordsPerRow(int64_t cols) {
  const int64_t pairs = (cols + 1) / 2, rest = pairs % kWordPairs;
  return pairs / kWordPairs + (rest == 0 ? 0 : (rest == 4 ? 2 : 1));
}

OptionSpec roundingOption() {
  return {.name = "rounding",
          .type = OptionType::Choice,
          .label = "Rounding",
          .help =
              "qmoe-ternary: gptq (error feedback through the inverse Hessian, as QMoE) or nearest (each "
              "weight to its nearest level: RTN-ternary, a baseline)",
          .default_value = "gptq",
          .choices = {"gptq", "nearest"},
          .read = {},
          .write = {}};
}

class QmoeTernaryMethod final : public WeightMethod {
 public:
  std::string_view name() const override { return "qmoe-ternary"; }
  std::string_view title() const override { return "QMoE ternary (GPTQ)"; }
  std::string_view summary() const override {
    return "QMoE's ternary code {min*a, 0, max*a} per row, rounded with GPTQ; stored as a dictionary payload "
           "at 1.6 bits per weight (needs --calib)";
  }
  const std::vector<OptionSpec>& options() const override { return options_; }
  MethodNeeds needs() const override { return MethodNeeds::CalibrationHessians; }
  PayloadKind payloadKind() const override { return PayloadKind::Dictionary; }
  void validate(const quant::QuantizeSettings&) const override {}
  PredictedSize predictedSize(const quant::QuantizeSettings&, int64_t rows, int64_t cols,
                              int) const override {
    return {2 * rows * wordsPerRow(cols) + 4 * (rows + 1) + 4 * rows, 0};
  }

  quant::QuantizedMatrix quantize(const MatrixRM& w, const quant::QuantizeSettings& s, int, uint64_t, int,
                                  const IterationCallback&,
                                  const quant::MatrixHessian* calibration) const override {
    const gptq::SolverOptions solver = gptq::solverOptions(s, *option("damp"), *option("act-order"));
    const bool feedback = optionValue(*option("rounding"), s) == "gptq";
    std::string fallback;
    std::map<std::string, double> measures;
    std::optional<gptq::TernaryGrid> grid;
    if (feedback && calibration) {
      std::vector<double> diag(static_cast<std::size_t>(w.cols()));
      for (int64_t j = 0; j < w.cols(); ++j) diag[std::size_t(j)] = std::max(0.0, calibration->h(j, j));
      grid.emplace(std::move(diag));
      const gptq::SolverResult r = gptq::solve(w, calibration->h, solver, *grid);
      if (r.solved) {
        measures["damp"] = r.damp;
        measures["dead_columns"] = double(r.dead_columns);
      } else {
        fallback = "nearest ternary rounding: " + r.failure;
        grid.reset();
      }
    } else if (feedback) {
      fallback = "nearest ternary rounding: no calibration token reached this matrix";
    }
    if (!grid) {
      grid.emplace();
      gptq::roundToNearest(w, *grid);
    }
    quant::TernaryCodes codes{w.rows(), w.cols(), grid->codes(), grid->lo(), grid->hi()};
    addCodeStatistics(codes, measures);
    quant::QuantizedMatrix q;
    q.method = s.method;
    q.source.rows = w.rows();
    q.source.cols = w.cols();
    q.payload = quant::encodeWithDictionary(codes, uniformDictionary());
    const MatrixRM approx = q.payload->dequantize();
    q.rel_error = quant::relativeError(w, approx);
    q.rel_error_float_compensators = q.rel_error;
    q.kurtosis = quant::excessKurtosis(w);
    q.bytes = q.payload->storedBytes();
    if (calibration && calibration->h.allFinite())
      measures["output_rel_error"] = gptq::outputRelativeError(w, approx, calibration->h);
    q.fallback = std::move(fallback);
    q.measures = std::move(measures);
    return q;
  }

 private:
  // QMoE's Table 3 quantities: the fraction of zero codes, the entropy of the codes (bits per weight)
  // and that of the pairs the dictionary codes (per weight: what a pair code could reach).
  static void addCodeStatistics(const quant::TernaryCodes& c, std::map<std::string, double>& measures) {
    std::array<double, 3> singles{};
    std::array<double, 9> pairs{};
    double pair_count = 0;
    for (int64_t r = 0; r < c.rows; ++r) {
      const int8_t* row = c.codes.data() + r * c.cols;
      for (int64_t j = 0; j < c.cols; ++j) singles[std::size_t(row[j] + 1)] += 1;
      for (int64_t j = 0; j < c.cols; j += 2) {
        pairs[quant::ternaryPairSymbol(row[j], j + 1 < c.cols ? row[j + 1] : 0)] += 1;
        pair_count += 1;
      }
    }
    auto entropy = [](const auto& counts, double total) {
      double h = 0;
      for (double n : counts)
        if (n > 0) h -= n / total * std::log2(n / total);
      return h;
    };
    const double n = double(c.rows * c.cols);
    measures["zero_fraction"] = singles[1] / n;
    measures["code_entropy_bits"] = entropy(singles, n);
    measures["pair_entropy_bits"] = entropy(pairs, pair_count) * pair_count / n;
  }

  std::vector<OptionSpec> options_ = {gptq::dampOption(), gptq::actOrderOption(), roundingOption()};
};

}  // namespace

std::unique_ptr<WeightMethod> makeQmoeTernaryMethod() {
  return std::make_unique<QmoeTernaryMethod>();
}

}  // namespace moewb::methods

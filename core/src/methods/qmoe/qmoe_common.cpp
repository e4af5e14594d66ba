// SPDX-License-Identifier: MIT
#include "qmoe_common.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <optional>

#include "../gptq/gptq_method_common.h"
#include "../gptq/gptq_solver.h"
#include "moewb/error.h"

namespace moewb::methods::qmoe {

namespace {

constexpr int kWordPairs = 5;

// QMoE's Table 3 quantities: the fraction of zero codes, the entropy of the codes (bits per weight)
// and that of the pairs the dictionary codes (per weight: what a pair code could reach).
void addCodeStatistics(const quant::TernaryCodes& c, std::map<std::string, double>& measures) {
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

}  // namespace

OptionSpec roundingOption() {
  return {.name = "rounding",
          .type = OptionType::Choice,
          .label = "Rounding",
          .help =
              "QMoE: gptq (error feedback through the inverse Hessian, as QMoE) or nearest (each weight to "
              "its nearest level: RTN-ternary, a baseline)",
          .default_value = "gptq",
          .choices = {"gptq", "nearest"},
          .read = {},
          .write = {}};
}

OptionSpec alphaOption(std::string default_value) {
  return {.name = "alpha",
          .type = OptionType::Text,
          .label = "Ternary levels",
          .help =
              "QMoE: the row's levels {a*min, 0, a*max}: fit (a per row in 0.05..1 by the diag-H-weighted "
              "rounding error; dense codes), max (a = 1, QMoE's plain min/max; sparse codes, which the "
              "sub-1-bit dictionary code needs) or a number in (0, 1] for every row",
          .default_value = std::move(default_value),
          .choices = {},
          .read = {},
          .write = {}};
}

double fixedAlpha(const WeightMethod& method, const quant::QuantizeSettings& s) {
  const std::string text = optionValue(*method.option("alpha"), s);
  if (text == "fit") return 0.0;
  if (text == "max") return 1.0;
  std::size_t used = 0;
  double alpha = 0;
  try {
    alpha = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !(alpha > 0 && alpha <= 1))
    throw Error(fmt::format("{}: --alpha '{}' is not fit, max or a number in (0, 1]", method.name(), text));
  return alpha;
}

TernaryRounding roundTernary(const WeightMethod& method, const MatrixRM& w, const quant::QuantizeSettings& s,
                             const quant::MatrixHessian* calibration) {
  const gptq::SolverOptions solver = gptq::solverOptions(s, *method.option("damp"), *method.option("act-order"));
  const bool feedback = optionValue(*method.option("rounding"), s) == "gptq";
  const double fixed_alpha = fixedAlpha(method, s);
  TernaryRounding out;
  std::optional<gptq::TernaryGrid> grid;
  if (feedback && calibration) {
    std::vector<double> diag(static_cast<std::size_t>(w.cols()));
    for (int64_t j = 0; j < w.cols(); ++j) diag[std::size_t(j)] = std::max(0.0, calibration->h(j, j));
    grid.emplace(std::move(diag), fixed_alpha);
    const gptq::SolverResult r = gptq::solve(w, calibration->h, solver, *grid);
    if (r.solved) {
      out.measures["damp"] = r.damp;
      out.measures["dead_columns"] = double(r.dead_columns);
    } else {
      out.fallback = "nearest ternary rounding: " + r.failure;
      grid.reset();
    }
  } else if (feedback) {
    out.fallback = "nearest ternary rounding: no calibration token reached this matrix";
  }
  if (!grid) {
    grid.emplace(std::vector<double>{}, fixed_alpha);
    gptq::roundToNearest(w, *grid);
  }
  out.codes = quant::TernaryCodes{w.rows(), w.cols(), grid->codes(), grid->lo(), grid->hi()};
  addCodeStatistics(out.codes, out.measures);
  return out;
}

quant::QuantizedMatrix storeTernary(const MatrixRM& w, const quant::QuantizeSettings& s, TernaryRounding&& t,
                                    const quant::TernaryEncoder& encoder,
                                    const quant::MatrixHessian* calibration) {
  quant::QuantizedMatrix q;
  q.method = s.method;
  q.source.rows = w.rows();
  q.source.cols = w.cols();
  q.payload = encoder.encode(t.codes);
  const MatrixRM approx = q.payload->dequantize();
  q.rel_error = quant::relativeError(w, approx);
  q.rel_error_float_compensators = q.rel_error;
  q.kurtosis = quant::excessKurtosis(w);
  q.bytes = q.payload->storedBytes();
  if (calibration && calibration->h.allFinite())
    t.measures["output_rel_error"] = gptq::outputRelativeError(w, approx, calibration->h);
  q.fallback = std::move(t.fallback);
  q.measures = std::move(t.measures);
  return q;
}

const quant::TernaryEncoder& uniformEncoder() {
  static const quant::TernaryEncoder encoder = [] {
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
    return quant::TernaryEncoder(
        std::make_shared<const quant::TernaryDictionary>(entries, "uniform ternary dictionary"));
  }();
  return encoder;
}

int64_t uniformStoredBytes(int64_t rows, int64_t cols) {
  // Greedy longest match: 5-pair words, then a tail of 1..3 pairs, or 3 + 1 for a tail of 4.
  const int64_t pairs = (cols + 1) / 2, rest = pairs % kWordPairs;
  const int64_t words = pairs / kWordPairs + (rest == 0 ? 0 : (rest == 4 ? 2 : 1));
  return 2 * rows * words + 4 * (rows + 1) + 4 * rows;
}

quant::TernaryCodes decodeTernary(const quant::TernaryDictionaryPayload& p) {
  quant::TernaryCodes c{p.rows(), p.cols(), {}, p.lo(), p.hi()};
  c.codes.reserve(std::size_t(p.rows() * p.cols()));
  for (int64_t r = 0; r < p.rows(); ++r) {
    const std::vector<int8_t> row = p.decodeTernaryCodes(r);
    c.codes.insert(c.codes.end(), row.begin(), row.end());
  }
  return c;
}

}  // namespace moewb::methods::qmoe

// SPDX-License-Identifier: MIT
// qmoe-ternary: QMoE's ternary code made with GPTQ. Each row's weights become {lo, 0, hi} =
// {alpha * min, 0, alpha * max} of the row (alpha per row, chosen by the diag-H-weighted rounding error,
// or 1 with --alpha max), rounded column by column with GPTQ's error feedback (qmoe_common.h,
// ../gptq/gptq_solver.h).
//
// Stored form: the dictionary payload (moewb/quant/payloads/ternary_dictionary.h) with a fixed
// *uniform* dictionary: every sequence of 5 ternary pairs (9^5 = 59049 codewords) plus every sequence
// of 1 to 3 pairs for row tails, 59868 in all. That holds lo and hi per row exactly (fp16), which grouped
// 2-bit codes cannot (their levels are evenly spaced, so {lo, 0, hi} fits only when hi / -lo is 1, 2
// or 1/2), and costs 16 bits per 10 weights = 1.6 bits per weight (log2 3 = 1.585 is the bound for
// codes without structure), plus the dictionary once per export (479 kB). The sub-1-bit method
// (qmoe-sub1) replaces this dictionary with one built from the codes' statistics; the codes, the row
// values and the payload are the same.
#include "moewb/methods/weight_method.h"
#include "../gptq/gptq_method_common.h"
#include "qmoe_common.h"

namespace moewb::methods {
namespace {

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
  void validate(const quant::QuantizeSettings& s) const override { qmoe::fixedAlpha(*this, s); }
  PredictedSize predictedSize(const quant::QuantizeSettings&, int64_t rows, int64_t cols,
                              int) const override {
    return {qmoe::uniformStoredBytes(rows, cols), 0};
  }

  quant::QuantizedMatrix quantize(const MatrixRM& w, const quant::QuantizeSettings& s, int, uint64_t, int,
                                  const IterationCallback&,
                                  const quant::MatrixHessian* calibration) const override {
    return qmoe::storeTernary(w, s, qmoe::roundTernary(*this, w, s, calibration), qmoe::uniformEncoder(),
                              calibration);
  }

 private:
  std::vector<OptionSpec> options_ = {gptq::dampOption(), gptq::actOrderOption(), qmoe::roundingOption(),
                                      qmoe::alphaOption("fit")};
};

}  // namespace

std::unique_ptr<WeightMethod> makeQmoeTernaryMethod() {
  return std::make_unique<QmoeTernaryMethod>();
}

}  // namespace moewb::methods

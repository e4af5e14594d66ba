// SPDX-License-Identifier: MIT
// RTN: round to nearest with min/max scale and zero per group (moewb/quant/grouped_quant.h).
#include "moewb/methods/weight_method.h"
#include "../grouped/grouped_codes.h"

namespace moewb::methods {
namespace {

class RtnMethod final : public WeightMethod {
 public:
  std::string_view name() const override { return "rtn"; }
  std::string_view title() const override { return "RTN"; }
  std::string_view summary() const override { return "round to nearest, min/max scale and zero per group"; }
  const std::vector<OptionSpec>& options() const override { return options_; }
  std::vector<std::string> specPositionals() const override { return {"bits"}; }
  void validate(const quant::QuantizeSettings& s) const override { quant::validateSettings(s.grouped); }
  PredictedSize predictedSize(const quant::QuantizeSettings& s, int64_t rows, int64_t cols, int) const override {
    return {grouped::baseBytes(s, rows, cols), 0};
  }
  quant::QuantizedMatrix quantize(const MatrixRM& w, const quant::QuantizeSettings& s, int, uint64_t,
                                  int threads, const IterationCallback&,
                                  const quant::MatrixHessian*) const override {
    return grouped::storeBase(w, s, quant::quantizeRtn(w, s.grouped, threads));
  }
  nlohmann::json settingsJson(const quant::QuantizeSettings& s) const override { return grouped::settingsJson(s); }

 private:
  std::vector<OptionSpec> options_ = grouped::codeOptions();
};

}  // namespace

std::unique_ptr<WeightMethod> makeRtnMethod() { return std::make_unique<RtnMethod>(); }

}  // namespace moewb::methods

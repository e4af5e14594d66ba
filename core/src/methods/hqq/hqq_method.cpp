// SPDX-License-Identifier: MIT
// HQQ: half-quadratic optimisation of the zero point per group (moewb/quant/grouped_quant.h). Its codes
// can be computed by a BatchBackend (the GPU quantizer).
#include "moewb/methods/weight_method.h"
#include "../grouped/grouped_codes.h"

namespace moewb::methods {
namespace {

class HqqMethod final : public WeightMethod {
 public:
  std::string_view name() const override { return "hqq"; }
  std::string_view title() const override { return "HQQ"; }
  std::string_view summary() const override {
    return "half-quadratic quantization: grouped codes with an optimised zero point, calibration-free";
  }
  const std::vector<OptionSpec>& options() const override { return options_; }
  std::vector<std::string> specPositionals() const override { return {"bits"}; }
  bool runsOnGpu() const override { return true; }
  void validate(const quant::QuantizeSettings& s) const override { quant::validateSettings(s.grouped); }
  PredictedSize predictedSize(const quant::QuantizeSettings& s, int64_t rows, int64_t cols, int) const override {
    return {grouped::baseBytes(s, rows, cols), 0};
  }
  quant::ComputedMatrix compute(const MatrixRM& w, const quant::QuantizeSettings& s, int, uint64_t,
                                int threads, const IterationCallback&) const override {
    quant::ComputedMatrix c;
    c.base = quant::quantizeHqq(w, s.grouped, s.hqq, threads);
    return c;
  }
  quant::QuantizedMatrix storeComputed(const MatrixRM& w, const quant::QuantizeSettings& s, int,
                                       quant::ComputedMatrix&& c) const override {
    return grouped::storeBase(w, s, std::move(c.base));
  }
  quant::QuantizedMatrix quantize(const MatrixRM& w, const quant::QuantizeSettings& s, int rank,
                                  uint64_t seed, int threads, const IterationCallback& cb,
                                  const quant::MatrixHessian*) const override {
    return storeComputed(w, s, rank, compute(w, s, rank, seed, threads, cb));
  }
  nlohmann::json settingsJson(const quant::QuantizeSettings& s) const override { return grouped::settingsJson(s); }

 private:
  std::vector<OptionSpec> options_ = grouped::codeOptions();
};

}  // namespace

std::unique_ptr<WeightMethod> makeHqqMethod() { return std::make_unique<HqqMethod>(); }

}  // namespace moewb::methods

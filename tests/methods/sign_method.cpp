// SPDX-License-Identifier: MIT
// A toy compression method that proves the registry is the only place a method is named: "sign" stores
// each weight as one bit (its sign) times a per-row scale. It is added by this one file and nothing
// else; the tests built with it (sign_method_test.cpp, tests/gui/tst_method_registry.cpp) check that it
// reaches `moewb quantize --help`, quick specs, export and `moewb eval --quantized`, and the GUI's list.
#include <cmath>

#include "moewb/dtype.h"
#include "moewb/methods/registry.h"

namespace {

using moewb::methods::OptionSpec;
using moewb::methods::OptionType;
using moewb::MatrixRM;
using moewb::quant::QuantizeSettings;

class SignMethod final : public moewb::methods::WeightMethod {
 public:
  std::string_view name() const override { return "sign"; }
  std::string_view title() const override { return "Sign (1 bit per weight, one scale per row)"; }
  std::string_view summary() const override { return "toy 1-bit method: sign of each weight times a row scale"; }
  const std::vector<OptionSpec>& options() const override { return options_; }
  std::vector<std::string> specPositionals() const override { return {"scale"}; }
  void validate(const QuantizeSettings&) const override {}
  moewb::methods::PredictedSize predictedSize(const QuantizeSettings&, int64_t rows, int64_t cols,
                                              int) const override {
    return {(rows * cols + 31) / 32 * 4 + rows * 4, 0};
  }

  moewb::quant::QuantizedMatrix quantize(const MatrixRM& w, const QuantizeSettings& s, int, uint64_t, int,
                                         const moewb::methods::IterationCallback&,
                                         const moewb::quant::MatrixHessian*) const override {
    const bool max_abs = moewb::methods::optionValue(options_.front(), s) == "max-abs";
    moewb::quant::GroupedQuantized g;
    g.rows = w.rows();
    g.cols = w.cols();
    g.bits = 1;
    g.group = int(w.cols());
    g.codes.resize(std::size_t(w.size()));
    for (int64_t r = 0; r < g.rows; ++r) {
      double scale = 0;
      for (int64_t c = 0; c < g.cols; ++c) {
        const double a = std::abs(double(w(r, c)));
        scale = max_abs ? std::max(scale, a) : scale + a / double(g.cols);
        g.codes[std::size_t(r * g.cols + c)] = w(r, c) >= 0 ? 1 : 0;
      }
      // (code - 0.5) * 2 * scale = +-scale, with the stored step exactly representable in fp16.
      g.scales.push_back(moewb::halfToFloat(moewb::floatToHalf(float(2 * scale))));
      g.zeros.push_back(0.5f);
    }
    moewb::quant::QuantizedMatrix q;
    q.method = s.method;
    q.source.rows = w.rows();
    q.source.cols = w.cols();
    q.base = std::move(g);
    q.rel_error = moewb::quant::relativeError(w, moewb::quant::dequantize(q.base));
    q.rel_error_float_compensators = q.rel_error;
    q.kurtosis = moewb::quant::excessKurtosis(w);
    q.bytes = moewb::quant::storedBytes(q.base);
    return q;
  }

 private:
  std::vector<OptionSpec> options_ = {OptionSpec{.name = "scale",
                                                 .type = OptionType::Choice,
                                                 .label = "Row scale",
                                                 .help = "Per-row scale: the mean or the largest magnitude",
                                                 .default_value = "mean-abs",
                                                 .choices = {"mean-abs", "max-abs"}}};
};

const moewb::methods::MethodRegistrar registrar(std::make_unique<SignMethod>());

}  // namespace

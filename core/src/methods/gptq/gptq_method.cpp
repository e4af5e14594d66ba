// SPDX-License-Identifier: MIT
// GPTQ: calibrated rounding to grouped integer codes (gptq_solver.h), stored exactly as RTN's and HQQ's
// codes, so export, import, eval and the GPU kernels take it unchanged. A matrix without a Hessian (an
// expert no calibration token reached) or whose Hessian cannot be factorised at any damping gets RTN,
// and says so in QuantizedMatrix::fallback.
#include <fmt/format.h>

#include "moewb/methods/weight_method.h"
#include "../grouped/grouped_codes.h"
#include "gptq_method_common.h"
#include "gptq_solver.h"
#include "moewb/error.h"

namespace moewb::methods {
namespace {

std::vector<OptionSpec> gptqOptions() {
  std::vector<OptionSpec> options = grouped::codeOptions();
  OptionSpec& group = options[1];
  group.help = "Weights per scale and zero along the input dimension (0: one per row)";
  group.min = 0;
  options.push_back(gptq::dampOption());
  options.push_back(gptq::actOrderOption());
  return options;
}

class GptqMethod final : public WeightMethod {
 public:
  std::string_view name() const override { return "gptq"; }
  std::string_view title() const override { return "GPTQ (calibrated, grouped codes)"; }
  std::string_view summary() const override {
    return "GPTQ: rounds column by column with error feedback through the inverse Hessian of calibration "
           "inputs; grouped codes as RTN (needs --calib)";
  }
  const std::vector<OptionSpec>& options() const override { return options_; }
  std::vector<std::string> specPositionals() const override { return {"bits"}; }
  MethodNeeds needs() const override { return MethodNeeds::CalibrationHessians; }

  void validate(const quant::QuantizeSettings& s) const override {
    // Group 0 (one group per row) is resolved per matrix; anything else is checked as RTN's.
    quant::validateSettings({s.grouped.bits, s.grouped.group == 0 ? 1 : s.grouped.group});
  }
  PredictedSize predictedSize(const quant::QuantizeSettings& s, int64_t rows, int64_t cols,
                              int) const override {
    quant::QuantizeSettings resolved = s;
    resolved.grouped.group = int(groupOf(s, cols));
    return {grouped::baseBytes(resolved, rows, cols), 0};
  }

  quant::QuantizedMatrix quantize(const MatrixRM& w, const quant::QuantizeSettings& s, int, uint64_t, int,
                                  const IterationCallback&,
                                  const quant::MatrixHessian* calibration) const override {
    const gptq::SolverOptions solver = gptq::solverOptions(s, *option("damp"), *option("act-order"));
    gptq::UniformGrid grid(s.grouped.bits, groupOf(s, w.cols()), solver.act_order);
    std::string fallback;
    std::map<std::string, double> measures;
    if (!calibration) {
      gptq::roundToNearest(w, grid);
      fallback = "rtn: no calibration token reached this matrix";
    } else {
      const gptq::SolverResult r = gptq::solve(w, calibration->h, solver, grid);
      if (r.solved) {
        measures["damp"] = r.damp;
        measures["dead_columns"] = double(r.dead_columns);
      } else {
        gptq::UniformGrid rtn(s.grouped.bits, groupOf(s, w.cols()), false);
        gptq::roundToNearest(w, rtn);
        grid = std::move(rtn);
        fallback = "rtn: " + r.failure;
      }
    }
    quant::QuantizedMatrix q = grouped::storeBase(w, s, grid.take());
    if (calibration && calibration->h.allFinite())
      measures["output_rel_error"] = gptq::outputRelativeError(w, quant::dequantize(q.base), calibration->h);
    q.fallback = std::move(fallback);
    q.measures = std::move(measures);
    return q;
  }

 private:
  static int64_t groupOf(const quant::QuantizeSettings& s, int64_t cols) {
    return s.grouped.group == 0 ? cols : s.grouped.group;
  }
  std::vector<OptionSpec> options_ = gptqOptions();
};

}  // namespace

std::unique_ptr<WeightMethod> makeGptqMethod() {
  return std::make_unique<GptqMethod>();
}

}  // namespace moewb::methods

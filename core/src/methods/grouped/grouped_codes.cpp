// SPDX-License-Identifier: MIT
#include "grouped_codes.h"

#include <string>

namespace moewb::methods::grouped {

std::vector<OptionSpec> codeOptions() {
  OptionSpec bits{.name = "bits",
                  .type = OptionType::Integer,
                  .label = "Bits",
                  .help = "Bits of the base weights' codes",
                  .default_value = "3",
                  .choices = {"2", "3", "4", "8"}};
  bits.read = [](const quant::QuantizeSettings& s) { return std::to_string(s.grouped.bits); };
  bits.write = [](quant::QuantizeSettings& s, const std::string& v) { s.grouped.bits = std::stoi(v); };
  OptionSpec group{.name = "group",
                   .type = OptionType::Integer,
                   .label = "Group size",
                   .help = "Weights per scale and zero along the input dimension",
                   .default_value = "64",
                   .min = 1,
                   .max = 65536};
  group.read = [](const quant::QuantizeSettings& s) { return std::to_string(s.grouped.group); };
  group.write = [](quant::QuantizeSettings& s, const std::string& v) { s.grouped.group = std::stoi(v); };
  return {bits, group};
}

nlohmann::json settingsJson(const quant::QuantizeSettings& s) {
  using quant::HqqStopRule;
  return {{"method", s.method},
          {"bits", s.grouped.bits},
          {"group", s.grouped.group},
          {"hqq",
           {{"lp_norm", s.hqq.lp_norm},
            {"beta", s.hqq.beta},
            {"kappa", s.hqq.kappa},
            {"max_steps", s.hqq.max_steps},
            {"patience", s.hqq.patience},
            {"stop", s.hqq.stop == HqqStopRule::PerGroupBestSquaredError ? "per-group" : "global"}}},
          {"milo",
           {{"max_iters", s.milo.max_iters},
            {"tol", s.milo.tol},
            {"window", s.milo.window},
            {"svd", s.milo.svd.method == quant::SvdMethod::Exact ? "exact" : "randomized"},
            {"oversample", s.milo.svd.oversample},
            {"power_iters", s.milo.svd.power_iters},
            {"compensator", quant::compensatorFormatName(s.milo.compensator)},
            {"compensator_group", s.milo.compensator_group}}},
          {"seed", s.seed}};
}

int64_t baseBytes(const quant::QuantizeSettings& s, int64_t rows, int64_t cols) {
  const int64_t groups = rows * ((cols + s.grouped.group - 1) / s.grouped.group);
  return quant::packedCodeBytes(rows * cols, s.grouped.bits) + groups * 4;
}

quant::QuantizedMatrix storeBase(const MatrixRM& w, const quant::QuantizeSettings& s,
                                 quant::GroupedQuantized&& base) {
  quant::QuantizedMatrix q;
  q.method = s.method;
  q.source.rows = w.rows();
  q.source.cols = w.cols();
  q.base = std::move(base);
  q.rel_error = quant::relativeError(w, quant::dequantize(q.base));
  q.rel_error_float_compensators = q.rel_error;
  q.kurtosis = quant::excessKurtosis(w);
  q.bytes = quant::storedBytes(q.base);
  return q;
}

}  // namespace moewb::methods::grouped

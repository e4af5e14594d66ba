// SPDX-License-Identifier: MIT
#pragma once
// What qmoe-ternary and qmoe-sub1 share: their options, QMoE's ternary rounding of one matrix (GPTQ
// onto per-row {alpha * min, 0, alpha * max}), the code statistics of QMoE's Table 3, and how a matrix
// of ternary codes is stored as a dictionary payload.
#include <map>
#include <memory>
#include <string>

#include "moewb/methods/weight_method.h"
#include "moewb/quant/payloads/ternary_dictionary.h"

namespace moewb::methods::qmoe {

// --rounding gptq|nearest.
OptionSpec roundingOption();
// --alpha fit|max|A: fit searches alpha per row in 0.05..1 by the diag-H-weighted rounding error; max
// takes alpha = 1 (QMoE's plain min/max: sparse codes); a number A in (0, 1] fixes alpha for every row.
OptionSpec alphaOption(std::string default_value);
// The fixed alpha the settings ask for (0: fit). Throws moewb::Error naming the method and the value
// when it is none of fit, max or a number in (0, 1] (the methods' validate()).
double fixedAlpha(const WeightMethod& method, const quant::QuantizeSettings& s);

// One matrix's ternary codes and what the rounding has to report.
struct TernaryRounding {
  quant::TernaryCodes codes;
  std::string fallback;                  // empty, or "nearest ternary rounding: why"
  std::map<std::string, double> measures;  // damp, dead_columns (GPTQ ran); code statistics
};

// QMoE's ternary code of `w` with the method's options damp, act-order, rounding and alpha: GPTQ with
// `calibration` (nearest rounding, reported as a fallback, when it is nullptr or its Cholesky fails).
// Adds the code statistics (zero_fraction, code_entropy_bits, pair_entropy_bits) to the measures.
TernaryRounding roundTernary(const WeightMethod& method, const MatrixRM& w, const quant::QuantizeSettings& s,
                             const quant::MatrixHessian* calibration);

// The stored matrix: `rounding`'s codes written with `encoder`'s dictionary, errors of what is stored,
// output_rel_error when there is a Hessian.
quant::QuantizedMatrix storeTernary(const MatrixRM& w, const quant::QuantizeSettings& s,
                                    TernaryRounding&& rounding, const quant::TernaryEncoder& encoder,
                                    const quant::MatrixHessian* calibration);

// The fixed dictionary of qmoe-ternary: every 5-pair sequence plus every 1..3-pair tail (59868
// codewords, 1.6 bits per weight), and its encoder.
const quant::TernaryEncoder& uniformEncoder();
// Bytes a [rows, cols] matrix takes with it.
int64_t uniformStoredBytes(int64_t rows, int64_t cols);

// A dictionary payload's codes, lo and hi, decoded.
quant::TernaryCodes decodeTernary(const quant::TernaryDictionaryPayload& payload);

}  // namespace moewb::methods::qmoe

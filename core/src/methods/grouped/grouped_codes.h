// SPDX-License-Identifier: MIT
#pragma once
// What RTN, HQQ and MiLo share: grouped integer codes of `bits` bits with fp16 scales and zeros, the
// options that choose them, their stored size, and the manifest settings block they have always written.
#include <vector>

#include "moewb/methods/weight_method.h"

namespace moewb::methods::grouped {

// --bits and --group, bound to settings.grouped.
std::vector<OptionSpec> codeOptions();
// The manifest's "settings" for the three methods (every field of QuantizeSettings they read).
nlohmann::json settingsJson(const quant::QuantizeSettings& s);
int64_t baseBytes(const quant::QuantizeSettings& s, int64_t rows, int64_t cols);
// A result with codes only (RTN, HQQ): errors of what is stored, kurtosis, bytes.
quant::QuantizedMatrix storeBase(const MatrixRM& w, const quant::QuantizeSettings& s,
                                 quant::GroupedQuantized&& base);

}  // namespace moewb::methods::grouped

// SPDX-License-Identifier: MIT
#include "moewb/methods/weight_method.h"

#include <fmt/format.h>

#include "moewb/error.h"

namespace moewb::methods {

quant::ComputedMatrix WeightMethod::compute(const MatrixRM&, const quant::QuantizeSettings&, int,
                                            uint64_t, int, const IterationCallback&) const {
  throw Error(fmt::format("method {} has no batched (GPU) path", name()));
}

quant::QuantizedMatrix WeightMethod::storeComputed(const MatrixRM&, const quant::QuantizeSettings&,
                                                   int, quant::ComputedMatrix&&) const {
  throw Error(fmt::format("method {} has no batched (GPU) path", name()));
}

nlohmann::json WeightMethod::settingsJson(const quant::QuantizeSettings& settings) const {
  nlohmann::json options = nlohmann::json::object();
  for (const OptionSpec& spec : this->options()) options[spec.name] = optionValue(spec, settings);
  return {{"method", name()}, {"options", options}, {"seed", settings.seed}};
}

const OptionSpec* WeightMethod::option(std::string_view option_name) const {
  for (const OptionSpec& spec : options())
    if (spec.name == option_name) return &spec;
  return nullptr;
}

quant::QuantizeSettings WeightMethod::defaults() const {
  quant::QuantizeSettings s;
  s.method = std::string(name());
  for (const OptionSpec& spec : options()) setOption(spec, s, spec.default_value, spec.name);
  return s;
}

}  // namespace moewb::methods

// SPDX-License-Identifier: MIT
#include "gptq_method_common.h"

namespace moewb::methods::gptq {

OptionSpec dampOption() {
  return {.name = "damp",
          .type = OptionType::Real,
          .label = "Damping",
          .help =
              "GPTQ damping: this times the mean of diag H is added to H's diagonal; a Hessian that "
              "still cannot be factorised is retried with 10x up to 1, then rounded as RTN",
          .default_value = "0.01",
          .min = 0.001,
          .max = 1.0,
          .choices = {},
          .read = {},
          .write = {}};
}

OptionSpec actOrderOption() {
  return {
      .name = "act-order",
      .type = OptionType::Choice,
      .label = "Act-order",
      .help = "GPTQ: round columns in order of decreasing diag H (codes are stored in the original order)",
      .default_value = "off",
      .choices = {"off", "on"},
      .read = {},
      .write = {}};
}

SolverOptions solverOptions(const quant::QuantizeSettings& s, const OptionSpec& damp,
                            const OptionSpec& act_order) {
  SolverOptions o;
  o.damp = realOption(s, damp);
  o.max_damp = 1.0;
  o.act_order = optionValue(act_order, s) == "on";
  return o;
}

}  // namespace moewb::methods::gptq

// SPDX-License-Identifier: MIT
#pragma once
// Options GPTQ-based methods (gptq, qmoe-ternary) share, and their solver settings.
#include "gptq_solver.h"
#include "moewb/methods/weight_method.h"

namespace moewb::methods::gptq {

// --damp: lambda of the damping lambda * mean(diag H) (0.001..1; 0.01).
OptionSpec dampOption();
// --act-order off|on: columns in order of decreasing diag H.
OptionSpec actOrderOption();
SolverOptions solverOptions(const quant::QuantizeSettings& s, const OptionSpec& damp,
                            const OptionSpec& act_order);

}  // namespace moewb::methods::gptq

// SPDX-License-Identifier: MIT
#pragma once
// Factories of the built-in methods, each defined in its own folder; registry.cpp lists them.
#include <memory>
#include <vector>

#include "moewb/methods/kv_method.h"
#include "moewb/methods/weight_method.h"

namespace moewb::methods {

std::unique_ptr<WeightMethod> makeRtnMethod();
std::unique_ptr<WeightMethod> makeHqqMethod();
std::unique_ptr<WeightMethod> makeMiloMethod();
std::unique_ptr<WeightMethod> makeQetMethod();
std::unique_ptr<WeightMethod> makeGptqMethod();
std::unique_ptr<WeightMethod> makeQmoeTernaryMethod();
std::unique_ptr<WeightMethod> makeQmoeSub1Method();
// fp16, int8, int4, int2, kivi-2, kivi-4 (core/src/methods/kv/kv_formats.cpp).
std::vector<std::unique_ptr<KvMethod>> makeBuiltinKvMethods();

}  // namespace moewb::methods

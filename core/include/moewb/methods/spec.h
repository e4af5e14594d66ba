// SPDX-License-Identifier: MIT
#pragma once
// Quick specs: one string that names a method and its settings, for `moewb eval --quantize SPEC`, the
// GUI's perplexity quick specs and scripts. Grammar (one parser, here):
//   spec  := NAME (':' field)*
//   field := KEY '=' VALUE      an option of the method by name ("hqq:3:group=128")
//          | VALUE              the method's next positional option (rtn/hqq: bits; milo: bits, policy)
// KEY is lower-case letters, digits and '-', so a rank policy's overrides ("sparse-8;*.q_proj.weight=16")
// read as a value; a policy never holds ':'.
#include <string>
#include <string_view>

#include "moewb/methods/weight_method.h"

namespace moewb::methods {

struct MethodSpec {
  const WeightMethod* method = nullptr;
  quant::QuantizeSettings settings;  // the method's defaults with the spec's fields applied
  std::string policy;                // rank policy text ("" when not given)
};

// Throws moewb::Error quoting the spec and saying what was expected.
MethodSpec parseMethodSpec(std::string_view text);
// "rtn:BITS, hqq:BITS, milo:BITS:POLICY" for the registered methods: error messages and help.
std::string methodSpecSyntax();

}  // namespace moewb::methods

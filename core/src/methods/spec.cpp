// SPDX-License-Identifier: MIT
#include "moewb/methods/spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "moewb/error.h"
#include "moewb/methods/registry.h"

namespace moewb::methods {

namespace {

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  return s;
}

std::string syntaxOf(const WeightMethod& m) {
  std::string out(m.name());
  for (const std::string& p : m.specPositionals()) out += ":" + upper(p);
  return out;
}

}  // namespace

std::string methodSpecSyntax() {
  std::string out;
  for (const WeightMethod* m : MethodRegistry::instance().all()) out += (out.empty() ? "" : ", ") + syntaxOf(*m);
  return out;
}

MethodSpec parseMethodSpec(std::string_view text) {
  const std::string quoted = fmt::format("quick spec '{}'", text);
  const std::size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const WeightMethod* method = MethodRegistry::instance().find(name);
  if (!method)
    throw Error(fmt::format("{}: unknown method '{}'; expected one of {} (options as KEY=VALUE, e.g. hqq:3:group=128)",
                            quoted, name, methodSpecSyntax()));
  MethodSpec spec;
  spec.method = method;
  spec.settings = method->defaults();
  const std::vector<std::string> positionals = method->specPositionals();
  std::size_t next_positional = 0;
  std::string_view rest = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
  if (colon != std::string_view::npos && rest.empty())
    throw Error(fmt::format("{}: nothing after ':'; expected {}", quoted, syntaxOf(*method)));
  while (!rest.empty()) {
    const std::size_t end = rest.find(':');
    const std::string_view field = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (field.empty()) throw Error(fmt::format("{}: an empty field; expected {}", quoted, syntaxOf(*method)));
    // KEY=VALUE when KEY is a name of the method's options or looks like one (a rank policy's override
    // "PATTERN=RANK" has a pattern with '.', '*' or ';' in it and is a positional value).
    const std::size_t eq = field.find('=');
    const std::string_view key = eq == std::string_view::npos ? std::string_view() : field.substr(0, eq);
    const bool keyed = !key.empty() && key.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == std::string_view::npos;
    if (keyed) {
      const OptionSpec* option = method->option(key);
      if (!option) {
        std::string names;
        for (const auto& o : method->options()) names += (names.empty() ? "" : ", ") + o.name;
        throw Error(fmt::format("{}: method {} has no option '{}' (options: {})", quoted, method->name(), key, names));
      }
      setOption(*option, spec.settings, field.substr(eq + 1), fmt::format("{}: {}", quoted, option->name));
      continue;
    }
    if (next_positional >= positionals.size())
      throw Error(fmt::format("{}: unexpected field '{}'; expected {}", quoted, field, syntaxOf(*method)));
    const std::string& positional = positionals[next_positional++];
    if (positional == "policy" && method->usesRankPolicy()) {
      spec.policy = std::string(field);
      continue;
    }
    const OptionSpec* option = method->option(positional);
    setOption(*option, spec.settings, field, fmt::format("{}: {}", quoted, option->name));
  }
  method->validate(spec.settings);
  return spec;
}

}  // namespace moewb::methods

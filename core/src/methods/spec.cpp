// SPDX-License-Identifier: MIT
#include "moewb/methods/spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "moewb/error.h"
#include "moewb/methods/kv_method.h"
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

std::string kvSpecSyntax() {
  return fmt::format("{} (options as KEY=VALUE: int4-g32 = int4:group=32, kivi-2:residual=64, :chunk=N; moqae:ROUTER.json)",
                     MethodRegistry::instance().kvNamesText());
}

KvSpec parseKvSpec(std::string_view text) {
  const std::string quoted = fmt::format("KV spec '{}'", text);
  const std::size_t colon = text.find(':');
  std::string_view name = text.substr(0, colon);
  const MethodRegistry& registry = MethodRegistry::instance();
  // "int4-g32": a group size spelled into the name, when the name without it is a format with a group.
  std::string_view group_suffix;
  if (!registry.findKv(name)) {
    const std::size_t g = name.rfind("-g");
    if (g != std::string_view::npos && g + 2 < name.size() &&
        name.find_first_not_of("0123456789", g + 2) == std::string_view::npos &&
        registry.findKv(name.substr(0, g))) {
      group_suffix = name.substr(g + 2);
      name = name.substr(0, g);
    }
  }
  const KvMethod* method = registry.findKv(name);
  if (!method)
    throw Error(fmt::format("{}: unknown KV format '{}'; expected one of {}", quoted, name, kvSpecSyntax()));
  if (method->choosesPerChunk())
    throw Error(fmt::format("{}: {} chooses a format per chunk (a policy, `--kv {}:ARGUMENT`), it is not a "
                            "format a chunk can be stored in",
                            quoted, method->name(), method->name()));
  KvSpec spec;
  spec.text = std::string(text);
  spec.format.method = method;
  spec.format.settings = method->defaults();
  if (!group_suffix.empty()) {
    const OptionSpec* group = method->option("group");
    if (!group) throw Error(fmt::format("{}: format {} has no group size", quoted, method->name()));
    setOption(*group, spec.format.settings.extra, group_suffix, fmt::format("{}: group", quoted));
  }
  std::string_view rest = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
  if (colon != std::string_view::npos && rest.empty())
    throw Error(fmt::format("{}: nothing after ':'; expected KEY=VALUE", quoted));
  while (!rest.empty()) {
    const std::size_t end = rest.find(':');
    const std::string_view field = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    const std::size_t eq = field.find('=');
    if (field.empty() || eq == std::string_view::npos || eq == 0)
      throw Error(fmt::format("{}: field '{}' is not KEY=VALUE", quoted, field));
    const std::string_view key = field.substr(0, eq), value = field.substr(eq + 1);
    if (key == "chunk") {
      OptionSpec chunk;  // the policy's, not the format's: every KV spec takes it
      chunk.name = "chunk";
      chunk.min = 1;
      chunk.max = 1 << 20;
      OptionValues v;
      setOption(chunk, v, value, fmt::format("{}: chunk", quoted));
      spec.chunk_tokens = static_cast<int>(integerOption(v, chunk));
      continue;
    }
    const OptionSpec* option = method->option(key);
    if (!option) {
      std::string names;
      for (const auto& o : method->options()) names += o.name + ", ";
      throw Error(fmt::format("{}: format {} has no option '{}' (options: {}chunk)", quoted, method->name(), key,
                              names));
    }
    setOption(*option, spec.format.settings.extra, value, fmt::format("{}: {}", quoted, option->name));
  }
  method->validate(spec.format.settings);
  return spec;
}

}  // namespace moewb::methods

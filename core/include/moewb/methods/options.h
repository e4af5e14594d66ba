// SPDX-License-Identifier: MIT
#pragma once
// The options a compression method takes, described as data: the CLI makes its flags, the GUI its form,
// the quick-spec parser its keys and the report its settings table from these descriptions.
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace moewb::quant {
struct QuantizeSettings;
}

namespace moewb::methods {

enum class OptionType : unsigned char {
  Integer,  // whole number in [min, max] (or one of `choices` when given)
  Real,     // finite number in [min, max]
  Choice,   // one of `choices`
  Text,     // free text (checked by the method)
};

// Options of methods without typed fields in QuantizeSettings, by option name, as the user gave them.
using OptionValues = std::map<std::string, std::string, std::less<>>;

struct OptionSpec {
  std::string name;  // "bits", "max-iters": the CLI flag without its dashes and the quick-spec key
  OptionType type = OptionType::Integer;
  std::string label;          // the GUI form's label: "Bits"
  std::string help;           // one sentence for --help and tooltips
  std::string default_value;  // as text, valid for this spec
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices = {};
  // Where the value lives in QuantizeSettings. Unset: in settings.extra under `name`.
  std::function<std::string(const quant::QuantizeSettings&)> read = {};
  std::function<void(quant::QuantizeSettings&, const std::string&)> write = {};
};

// The option's current value as text (its default when never set).
std::string optionValue(const OptionSpec& spec, const quant::QuantizeSettings& settings);
// Checks `text` against the spec and stores it. Throws moewb::Error naming `origin` ("quantize: --bits",
// "--quantize 'hqq:9'"), the value and what was expected.
void setOption(const OptionSpec& spec, quant::QuantizeSettings& settings, std::string_view text,
               std::string_view origin);
// "2, 3, 4 or 8" / "an integer in 1..65536": what a value must be, for messages and help.
std::string expectedText(const OptionSpec& spec);

// Typed reads of an option kept in settings.extra (for methods without typed fields); the value was
// checked by setOption, so these only fall back to the spec's default.
long long integerOption(const quant::QuantizeSettings& settings, const OptionSpec& spec);
double realOption(const quant::QuantizeSettings& settings, const OptionSpec& spec);

// The same for options kept only in a map of values (KV-cache methods, moewb/methods/kv_method.h); the
// spec's read/write are not used.
std::string optionValue(const OptionSpec& spec, const OptionValues& values);
void setOption(const OptionSpec& spec, OptionValues& values, std::string_view text, std::string_view origin);
long long integerOption(const OptionValues& values, const OptionSpec& spec);

}  // namespace moewb::methods

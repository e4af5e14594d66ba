// SPDX-License-Identifier: MIT
#include "moewb/methods/options.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "moewb/error.h"
#include "moewb/quant/model_quantizer.h"

namespace moewb::methods {

namespace {

std::string joinChoices(const std::vector<std::string>& choices) {
  std::string out;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out += i + 1 == choices.size() ? " or " : ", ";
    out += choices[i];
  }
  return out;
}

std::string numberText(double v) {
  return std::isinf(v) ? (v > 0 ? "inf" : "-inf") : fmt::format("{}", v);
}

bool parseInteger(std::string_view text, long long* out) {
  if (text.empty() || text.size() > 19) return false;
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

bool parseReal(std::string_view text, double* out) {
  if (text.empty() || text.size() > 64) return false;
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

}  // namespace

std::string expectedText(const OptionSpec& spec) {
  if (!spec.choices.empty()) return joinChoices(spec.choices);
  switch (spec.type) {
    case OptionType::Integer:
      return fmt::format("an integer in {}..{}", numberText(spec.min), numberText(spec.max));
    case OptionType::Real:
      return fmt::format("a number in [{}, {}]", numberText(spec.min), numberText(spec.max));
    case OptionType::Choice:
    case OptionType::Text:
      break;
  }
  return "text";
}

std::string optionValue(const OptionSpec& spec, const quant::QuantizeSettings& settings) {
  if (spec.read) return spec.read(settings);
  const auto it = settings.extra.find(spec.name);
  return it != settings.extra.end() ? it->second : spec.default_value;
}

namespace {

// `text` checked against the spec, in its stored spelling. Throws moewb::Error naming `origin`.
std::string checkedOptionText(const OptionSpec& spec, std::string_view text, std::string_view origin) {
  auto reject = [&] {
    return Error(fmt::format("{} '{}' is not {}", origin, text, expectedText(spec)));
  };
  std::string value(text);
  switch (spec.type) {
    case OptionType::Integer: {
      long long v = 0;
      if (!parseInteger(text, &v) || double(v) < spec.min || double(v) > spec.max) throw reject();
      value = std::to_string(v);
      break;
    }
    case OptionType::Real: {
      double v = 0;
      if (!parseReal(text, &v) || v < spec.min || v > spec.max) throw reject();
      break;
    }
    case OptionType::Choice:
    case OptionType::Text:
      break;
  }
  if (!spec.choices.empty() && std::find(spec.choices.begin(), spec.choices.end(), value) == spec.choices.end())
    throw reject();
  return value;
}

}  // namespace

void setOption(const OptionSpec& spec, quant::QuantizeSettings& settings, std::string_view text,
               std::string_view origin) {
  std::string value = checkedOptionText(spec, text, origin);
  if (spec.write)
    spec.write(settings, value);
  else
    settings.extra[spec.name] = std::move(value);
}

std::string optionValue(const OptionSpec& spec, const OptionValues& values) {
  const auto it = values.find(spec.name);
  return it != values.end() ? it->second : spec.default_value;
}

void setOption(const OptionSpec& spec, OptionValues& values, std::string_view text, std::string_view origin) {
  values[spec.name] = checkedOptionText(spec, text, origin);
}

long long integerOption(const OptionValues& values, const OptionSpec& spec) {
  long long v = 0;
  if (parseInteger(optionValue(spec, values), &v)) return v;
  parseInteger(spec.default_value, &v);
  return v;
}

long long integerOption(const quant::QuantizeSettings& settings, const OptionSpec& spec) {
  long long v = 0;
  if (parseInteger(optionValue(spec, settings), &v)) return v;
  parseInteger(spec.default_value, &v);
  return v;
}

double realOption(const quant::QuantizeSettings& settings, const OptionSpec& spec) {
  double v = 0;
  if (parseReal(optionValue(spec, settings), &v)) return v;
  parseReal(spec.default_value, &v);
  return v;
}

}  // namespace moewb::methods

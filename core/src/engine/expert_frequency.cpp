// SPDX-License-Identifier: MIT
#include "moewb/engine/expert_frequency.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "moewb/error.h"

namespace moewb::engine {

nlohmann::json ExpertFrequency::toJson() const {
  nlohmann::json j;
  j["tokens"] = tokens;
  j["top_k"] = top_k;
  j["num_experts"] = num_experts;
  j["layers"] = nlohmann::json::array();
  for (const auto& l : layers) j["layers"].push_back({{"layer", l.layer}, {"counts", l.counts}});
  return j;
}

std::string ExpertFrequency::toCsv() const {
  std::string out = "layer,expert,count,fraction\n";
  for (const auto& l : layers)
    for (std::size_t e = 0; e < l.counts.size(); ++e)
      out += fmt::format("{},{},{},{:.6f}\n", l.layer, e, l.counts[e],
                         tokens > 0 ? static_cast<double>(l.counts[e]) / static_cast<double>(tokens) : 0.0);
  return out;
}

nlohmann::json ExpertFrequencyFile::toJson() const {
  nlohmann::json j = frequency.toJson();
  if (!model.empty()) j["model"] = model;
  if (seq_len > 0) j["seq_len"] = seq_len;
  return j;
}

namespace {

// Expert indices above this are a broken file, not a model (the largest MoE models have 256 experts).
constexpr int kMaxExpert = 1 << 20;

constexpr const char* kJsonShape =
    R"(expected the JSON of `moewb freq --json`: {"layers":[{"layer":L,"counts":[C,...]},...]})";
constexpr const char* kCsvRow = "expected 'layer,expert,count[,fraction]' (whole non-negative numbers)";

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The whole field must be the number: "12abc" is not 12.
template <typename T>
bool parseField(std::string_view field, T& out) {
  field = trim(field);
  if (field.empty()) return false;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), out);
  return ec == std::errc() && end == field.data() + field.size();
}

// A count: a whole non-negative number, written "30" or "30.0".
bool parseCount(std::string_view field, int64_t& out) {
  if (parseField(field, out)) return out >= 0;
  double d = 0;
  if (!parseField(field, d) || !std::isfinite(d) || d < 0 || d != std::floor(d) || d > 9.0e15) return false;
  out = static_cast<int64_t>(d);
  return true;
}

void finish(ExpertFrequency& f) {
  for (const auto& l : f.layers) f.num_experts = std::max(f.num_experts, static_cast<int>(l.counts.size()));
}

ExpertFrequencyFile parseJson(std::string_view text, const std::string& origin) {
  ExpertFrequencyFile file;
  ExpertFrequency& f = file.frequency;
  auto fail = [&](const std::string& detail) {
    return Error(fmt::format("{}: {} ({})", origin, kJsonShape, detail));
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw fail(e.what());
  }
  if (!j.is_object()) throw fail("the document is not an object");
  if (!j.contains("layers") || !j.at("layers").is_array()) throw fail("no \"layers\" array");
  auto wholeField = [&](const char* key, int64_t max) -> int64_t {
    if (!j.contains(key)) return 0;
    const auto& v = j.at(key);
    int64_t n = 0;
    if (!v.is_number() || !parseCount(v.dump(), n) || n > max)
      throw fail(fmt::format("\"{}\" is {}, not a whole non-negative number", key, v.dump()));
    return n;
  };
  f.tokens = wholeField("tokens", INT64_MAX);
  f.top_k = static_cast<int>(wholeField("top_k", kMaxExpert));
  f.num_experts = static_cast<int>(wholeField("num_experts", kMaxExpert));
  file.seq_len = static_cast<int>(wholeField("seq_len", 1 << 30));
  if (j.contains("model")) {
    if (!j.at("model").is_string()) throw fail("\"model\" is not a string");
    file.model = j.at("model").get<std::string>();
  }
  std::map<int, std::vector<int64_t>> layers;
  for (std::size_t i = 0; i < j.at("layers").size(); ++i) {
    const auto& layer = j.at("layers")[i];
    const std::string where = fmt::format("layers[{}]", i);
    if (!layer.is_object() || !layer.contains("layer") || !layer.contains("counts") ||
        !layer.at("counts").is_array())
      throw fail(where + " needs \"layer\" and a \"counts\" array");
    int64_t index = 0;
    if (!layer.at("layer").is_number_integer() || !parseCount(layer.at("layer").dump(), index) ||
        index > kMaxExpert)
      throw fail(fmt::format("{}.layer is {}, not a layer index", where, layer.at("layer").dump()));
    std::vector<int64_t> counts;
    for (std::size_t e = 0; e < layer.at("counts").size(); ++e) {
      const auto& c = layer.at("counts")[e];
      int64_t n = 0;
      if (!c.is_number() || !parseCount(c.dump(), n))
        throw fail(fmt::format("{}.counts[{}] is {}, not a whole non-negative count", where, e, c.dump()));
      counts.push_back(n);
    }
    if (counts.size() > static_cast<std::size_t>(kMaxExpert)) throw fail(where + " has too many experts");
    if (!layers.emplace(static_cast<int>(index), std::move(counts)).second)
      throw fail(fmt::format("layer {} appears twice", index));
  }
  if (layers.empty()) throw fail("no layers");
  for (auto& [index, counts] : layers) f.layers.push_back({index, std::move(counts)});
  finish(f);
  return file;
}

ExpertFrequencyFile parseCsv(std::string_view text, const std::string& origin) {
  ExpertFrequencyFile file;
  ExpertFrequency& f = file.frequency;
  std::map<int, std::vector<int64_t>> layers;
  std::map<int, std::vector<bool>> seen;
  int64_t best_count = 0;  // the row whose fraction gives the token count most precisely
  double best_fraction = 0;
  std::size_t start = 0;
  for (int line_no = 1; start <= text.size(); ++line_no) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = trim(text.substr(start, end - start));
    start = end + 1;
    if (line.empty()) continue;
    if (line_no == 1 && !std::isdigit(static_cast<unsigned char>(line.front()))) continue;  // header
    std::vector<std::string_view> fields;
    for (std::size_t a = 0;;) {
      const std::size_t comma = line.find(',', a);
      fields.push_back(line.substr(a, comma == std::string_view::npos ? std::string_view::npos : comma - a));
      if (comma == std::string_view::npos) break;
      a = comma + 1;
    }
    int layer = 0, expert = 0;
    int64_t count = 0;
    double fraction = 0;
    if ((fields.size() != 3 && fields.size() != 4) || !parseField(fields[0], layer) || layer < 0 ||
        !parseField(fields[1], expert) || expert < 0 || expert > kMaxExpert ||
        !parseCount(fields[2], count) ||
        (fields.size() == 4 && (!parseField(fields[3], fraction) || !(fraction >= 0))))
      throw Error(
          fmt::format("{}:{}: {}, got '{}'", origin, line_no, kCsvRow,
                      line.size() > 60 ? std::string(line.substr(0, 60)) + "..." : std::string(line)));
    auto& counts = layers[layer];
    auto& had = seen[layer];
    if (counts.size() <= static_cast<std::size_t>(expert)) {
      counts.resize(static_cast<std::size_t>(expert) + 1, 0);
      had.resize(counts.size(), false);
    }
    if (had[static_cast<std::size_t>(expert)])
      throw Error(fmt::format("{}:{}: layer {} expert {} appears twice", origin, line_no, layer, expert));
    had[static_cast<std::size_t>(expert)] = true;
    counts[static_cast<std::size_t>(expert)] = count;
    if (fraction > 0 && count > best_count) best_count = count, best_fraction = fraction;
  }
  if (layers.empty())
    throw Error(fmt::format("{}: no frequency rows ({}, one per layer and expert)", origin, kCsvRow));
  for (auto& [index, counts] : layers) f.layers.push_back({index, std::move(counts)});
  finish(f);
  if (best_count > 0) {
    f.tokens = std::llround(static_cast<double>(best_count) / best_fraction);
    int64_t decisions = 0;
    for (int64_t c : f.layers.front().counts) decisions += c;
    if (f.tokens > 0) f.top_k = static_cast<int>(std::llround(static_cast<double>(decisions) / f.tokens));
  }
  return file;
}

}  // namespace

ExpertFrequencyFile parseExpertFrequencyFile(std::string_view text, const std::string& origin) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '{') return parseJson(text, origin);
  return parseCsv(text, origin);
}

ExpertFrequencyFile loadExpertFrequencyFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open the expert frequency file", path.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(fmt::format("{}: cannot read the expert frequency file", path.string()));
  return parseExpertFrequencyFile(ss.str(), path.string());
}

}  // namespace moewb::engine

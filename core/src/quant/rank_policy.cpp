// SPDX-License-Identifier: MIT
#include "moewb/quant/rank_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "moewb/engine/expert_frequency.h"
#include "moewb/error.h"

namespace moewb::quant {

namespace {

constexpr const char* kSyntax =
    "expected terms KIND-RANK joined by '+' (KIND: uniform, dense, sparse, frequency, kurtosis), "
    "optionally followed by ';PATTERN=RANK' overrides, e.g. 'dense-512+kurtosis-16;*.q_proj.weight=64'";

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return parts;
}

int parseRank(std::string_view s, std::string_view context) {
  s = trim(s);
  int v = -1;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v < 0)
    throw Error(
        fmt::format("rank policy: '{}' has no valid rank (a non-negative integer); {}", context, kSyntax));
  return v;
}

const char* kindName(RankTerm::Kind k) {
  switch (k) {
    case RankTerm::Kind::Uniform:
      return "uniform";
    case RankTerm::Kind::Dense:
      return "dense";
    case RankTerm::Kind::Sparse:
      return "sparse";
    case RankTerm::Kind::Frequency:
      return "frequency";
    case RankTerm::Kind::Kurtosis:
      return "kurtosis";
  }
  return "?";
}

bool isDense(const MatrixFacts& f) {
  return f.block == Block::Attention || f.block == Block::MlpDense || f.block == Block::SharedExpert;
}

int clipRank(const MatrixFacts& f, long r) {
  return int(std::clamp<long>(r, 0, long(std::min(f.rows, f.cols))));
}

// Ranks round(2^(k + c)) for the covered matrices with c found by bisection so the mean is `target`.
std::vector<int> kurtosisRanks(const std::vector<MatrixFacts>& facts, int target) {
  std::vector<int> ranks(facts.size(), 0);
  if (facts.empty() || target <= 0) return ranks;
  auto fill = [&](double c) {
    double sum = 0;
    for (std::size_t i = 0; i < facts.size(); ++i) {
      const double k = std::clamp(facts[i].kurtosis, -60.0, 60.0);
      ranks[i] = clipRank(facts[i], std::lround(std::min(1e9, std::exp2(k + c))));
      sum += ranks[i];
    }
    return sum / double(facts.size());
  };
  double lo = -130, hi = 130;
  for (int it = 0; it < 200; ++it) {
    const double mid = 0.5 * (lo + hi);
    (fill(mid) < target ? lo : hi) = mid;
  }
  // The mean is a step function of c: take the side whose mean is closer to the target.
  const double below = fill(lo), above = fill(hi);
  fill(std::abs(below - target) < std::abs(above - target) ? lo : hi);
  return ranks;
}

}  // namespace

bool operator==(const RankTerm& a, const RankTerm& b) {
  return a.kind == b.kind && a.rank == b.rank;
}
bool operator==(const RankOverride& a, const RankOverride& b) {
  return a.pattern == b.pattern && a.rank == b.rank;
}

RankPolicy RankPolicy::parse(std::string_view text) {
  RankPolicy p;
  const auto sections = split(text, ';');
  const std::string_view sum = trim(sections[0]);
  if (sum.empty()) throw Error(fmt::format("rank policy '{}' is empty; {}", text, kSyntax));
  for (std::string_view raw : split(sum, '+')) {
    const std::string_view term = trim(raw);
    const auto dash = term.rfind('-');
    if (dash == std::string_view::npos)
      throw Error(fmt::format("rank policy: term '{}' has no '-RANK'; {}", term, kSyntax));
    std::string kind(trim(term.substr(0, dash)));
    std::transform(kind.begin(), kind.end(), kind.begin(), [](unsigned char c) { return std::tolower(c); });
    RankTerm t;
    if (kind == "uniform")
      t.kind = RankTerm::Kind::Uniform;
    else if (kind == "dense")
      t.kind = RankTerm::Kind::Dense;
    else if (kind == "sparse")
      t.kind = RankTerm::Kind::Sparse;
    else if (kind == "frequency")
      t.kind = RankTerm::Kind::Frequency;
    else if (kind == "kurtosis")
      t.kind = RankTerm::Kind::Kurtosis;
    else
      throw Error(fmt::format("rank policy: unknown kind '{}' in '{}'; {}", kind, term, kSyntax));
    t.rank = parseRank(term.substr(dash + 1), term);
    p.terms.push_back(t);
  }
  for (std::size_t i = 1; i < sections.size(); ++i) {
    const std::string_view ov = trim(sections[i]);
    if (ov.empty()) continue;
    const auto eq = ov.rfind('=');
    if (eq == std::string_view::npos || trim(ov.substr(0, eq)).empty())
      throw Error(fmt::format("rank policy: override '{}' is not PATTERN=RANK; {}", ov, kSyntax));
    p.overrides.push_back({std::string(trim(ov.substr(0, eq))), parseRank(ov.substr(eq + 1), ov)});
  }
  return p;
}

std::string RankPolicy::text() const {
  std::string out;
  for (std::size_t i = 0; i < terms.size(); ++i)
    out += fmt::format("{}{}-{}", i ? "+" : "", kindName(terms[i].kind), terms[i].rank);
  for (const auto& o : overrides) out += fmt::format(";{}={}", o.pattern, o.rank);
  return out;
}

bool RankPolicy::needsFrequencies() const {
  return std::any_of(terms.begin(), terms.end(), [](auto& t) { return t.kind == RankTerm::Kind::Frequency; });
}
bool RankPolicy::needsKurtosis() const {
  return std::any_of(terms.begin(), terms.end(), [](auto& t) { return t.kind == RankTerm::Kind::Kurtosis; });
}

bool globMatch(std::string_view pattern, std::string_view text) {
  // Iterative wildcard match with backtracking to the last '*'.
  std::size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

// The file formats are engine::parseExpertFrequencyFile's (also what the GUI's frequency view reads).
ExpertFrequencies ExpertFrequencies::from(const engine::ExpertFrequency& measured) {
  ExpertFrequencies f;
  for (const auto& layer : measured.layers)
    f.counts[layer.layer] = std::vector<double>(layer.counts.begin(), layer.counts.end());
  return f;
}

ExpertFrequencies ExpertFrequencies::fromJson(const std::string& json_text, const std::string& origin) {
  const auto first = json_text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || json_text[first] != '{')
    throw Error(
        fmt::format("{}: expected a JSON object {{\"layers\":[{{\"layer\":L,\"counts\":[...]}}]}}", origin));
  return from(engine::parseExpertFrequencyFile(json_text, origin).frequency);
}

ExpertFrequencies ExpertFrequencies::load(const std::filesystem::path& file) {
  return from(engine::loadExpertFrequencyFile(file).frequency);
}

std::vector<int> assignRanks(const RankPolicy& policy, const std::vector<MatrixFacts>& facts,
                             const ExpertFrequencies* frequencies) {
  std::vector<long> sum(facts.size(), 0);
  for (const auto& term : policy.terms) {
    switch (term.kind) {
      case RankTerm::Kind::Uniform:
        for (auto& s : sum) s += term.rank;
        break;
      case RankTerm::Kind::Dense:
        for (std::size_t i = 0; i < facts.size(); ++i)
          if (isDense(facts[i])) sum[i] += term.rank;
        break;
      case RankTerm::Kind::Sparse:
        for (std::size_t i = 0; i < facts.size(); ++i)
          if (facts[i].isRoutedExpert()) sum[i] += term.rank;
        break;
      case RankTerm::Kind::Frequency: {
        if (!frequencies)
          throw Error("rank policy 'frequency-R' needs expert activation frequencies (--frequencies FILE)");
        for (std::size_t i = 0; i < facts.size(); ++i) {
          if (!facts[i].isRoutedExpert()) continue;
          const auto it = frequencies->counts.find(facts[i].layer);
          if (it == frequencies->counts.end() || facts[i].expert < 0 ||
              facts[i].expert >= int(it->second.size()))
            throw Error(fmt::format("rank policy 'frequency-{}': no frequency for layer {} expert {} ({})",
                                    term.rank, facts[i].layer, facts[i].expert, facts[i].name));
          double total = 0;
          for (double c : it->second) total += c;
          const double share =
              total > 0 ? it->second[std::size_t(facts[i].expert)] / total : 1.0 / double(it->second.size());
          sum[i] += std::lround(share * term.rank * double(it->second.size()));
        }
        break;
      }
      case RankTerm::Kind::Kurtosis: {
        const auto ranks = kurtosisRanks(facts, term.rank);
        for (std::size_t i = 0; i < facts.size(); ++i) sum[i] += ranks[i];
        break;
      }
    }
  }
  std::vector<int> out(facts.size());
  for (std::size_t i = 0; i < facts.size(); ++i) {
    long r = sum[i];
    for (const auto& o : policy.overrides)
      if (globMatch(o.pattern, facts[i].name)) r = o.rank;
    out[i] = clipRank(facts[i], r);
  }
  return out;
}

int64_t parseByteSize(std::string_view text) {
  const std::string_view s = trim(text);
  std::size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  double value = 0;
  try {
    value = std::stod(std::string(s.substr(0, i)));
  } catch (const std::exception&) {
    throw Error(fmt::format(
        "size '{}': expected a number with an optional unit (B, KB, MB, GB, KiB, MiB, GiB)", text));
  }
  std::string unit(trim(s.substr(i)));
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  const std::map<std::string, double> units = {
      {"", 1},         {"b", 1},           {"kb", 1e3},           {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
      {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"k", 1e3},  {"m", 1e6},  {"g", 1e9}};
  const auto it = units.find(unit);
  if (it == units.end() || value < 0)
    throw Error(
        fmt::format("size '{}': unknown unit '{}' (expected B, KB, MB, GB, KiB, MiB, GiB)", text, unit));
  // 18000000000GB overflowed int64 to a negative budget: said instead.
  const double bytes = value * it->second;
  if (!(bytes < 9.2e18))
    throw Error(fmt::format("size '{}' is too large (at most about 9.2 EB, 9200000000GB)", text));
  return int64_t(std::llround(bytes));
}

int64_t compensatorBytesFor(const std::vector<MatrixFacts>& facts, const std::vector<int>& ranks,
                            CompensatorFormat format, int compensator_group) {
  int64_t total = 0;
  for (std::size_t i = 0; i < facts.size(); ++i)
    total += compensatorBytes(facts[i].rows, facts[i].cols, ranks[i], format, compensator_group);
  return total;
}

RankPolicy policyForBudget(int64_t budget_bytes, int64_t fixed_bytes, const std::vector<MatrixFacts>& facts,
                           CompensatorFormat format, int compensator_group) {
  if (budget_bytes < fixed_bytes)
    throw Error(
        fmt::format("budget {:.1f} MB is below the size of the quantized model without compensators "
                    "({:.1f} MB): choose fewer bits or a larger budget",
                    budget_bytes / 1e6, fixed_bytes / 1e6));
  const int64_t room = budget_bytes - fixed_bytes;
  auto cost = [&](const RankPolicy& p) {
    return compensatorBytesFor(facts, assignRanks(p, facts), format, compensator_group);
  };
  RankPolicy best;
  int dense = 0;
  for (int r : {512, 256, 128, 64, 32, 16, 8}) {
    RankPolicy p;
    p.terms.push_back({RankTerm::Kind::Dense, r});
    if (cost(p) <= room) {
      dense = r;
      break;
    }
  }
  // The largest routed-expert rank that still fits (cost grows with the rank: bisection).
  int lo = 0, hi = 1;
  for (const auto& f : facts) hi = std::max<int>(hi, int(std::min(f.rows, f.cols)));
  auto policyOf = [&](int sparse) {
    RankPolicy p;
    p.terms.push_back({RankTerm::Kind::Dense, dense});
    p.terms.push_back({RankTerm::Kind::Sparse, sparse});
    return p;
  };
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cost(policyOf(mid)) <= room)
      lo = mid;
    else
      hi = mid - 1;
  }
  return policyOf(lo);
}

}  // namespace moewb::quant

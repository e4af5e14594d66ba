// SPDX-License-Identifier: MIT
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/quant/compensator.h"

namespace moewb::engine {
struct ExpertFrequency;
}

namespace moewb::quant {

// MiLo rank policies in the text syntax shared by the CLI, the GUI and project files
// (docs/rank-policies.md):
//   policy   := term ('+' term)* (';' override)*
//   term     := KIND '-' RANK      KIND in uniform, dense, sparse, frequency, kurtosis
//   override := PATTERN '=' RANK   PATTERN: a matrix name, '*' matches any run of characters
// Ranks of terms add up per matrix; overrides replace the sum (the last matching one wins); every rank is
// finally clipped to min(rows, cols).
//   uniform-R    every quantized matrix gets R
//   dense-R      attention, dense MLPs and shared experts get R
//   sparse-R     routed experts get R
//   frequency-R  routed expert e of a layer with E experts gets round(f_e / sum f * R * E) (mean R)
//   kurtosis-R   rank round(2^(k + c)) from the excess kurtosis k (higher kurtosis, higher rank), with c
//                chosen so the mean over the quantized matrices is R (MiLo's 2^(k+c), generalised)
struct RankTerm {
  enum class Kind : uint8_t { Uniform, Dense, Sparse, Frequency, Kurtosis };
  Kind kind = Kind::Uniform;
  int rank = 0;
};
struct RankOverride {
  std::string pattern;
  int rank = 0;
};
struct RankPolicy {
  std::vector<RankTerm> terms;
  std::vector<RankOverride> overrides;
  // Throws moewb::Error naming the bad part and the expected syntax.
  static RankPolicy parse(std::string_view text);
  std::string text() const;  // canonical form, parse(text()) == *this
  bool needsFrequencies() const;
  bool needsKurtosis() const;
  bool operator==(const RankPolicy&) const = default;
};
bool operator==(const RankTerm& a, const RankTerm& b);
bool operator==(const RankOverride& a, const RankOverride& b);

// Routed-expert activation counts per layer (global layer index), from `moewb freq --json` output
// {"layers":[{"layer":L,"counts":[...]}]} or a CSV with lines "layer,expert,count[,fraction]" (header
// optional): the files engine::loadExpertFrequencyFile reads (formats and errors there).
struct ExpertFrequencies {
  std::map<int, std::vector<double>> counts;
  static ExpertFrequencies load(const std::filesystem::path& file);
  static ExpertFrequencies fromJson(const std::string& json_text, const std::string& origin = "JSON");
  static ExpertFrequencies from(const engine::ExpertFrequency& measured);
};

// What a policy needs to know about one quantized matrix.
struct MatrixFacts {
  std::string name;
  int64_t rows = 0, cols = 0;
  Block block = Block::Other;
  int layer = -1;
  int expert = -1;
  double kurtosis = 0;  // excess kurtosis of the weights
  bool isRoutedExpert() const { return block == Block::Expert; }
};

// Ranks per matrix (same order as `facts`). Throws when frequencies are needed but missing.
std::vector<int> assignRanks(const RankPolicy& policy, const std::vector<MatrixFacts>& facts,
                             const ExpertFrequencies* frequencies = nullptr);

bool globMatch(std::string_view pattern, std::string_view text);

// "200MB", "1.5GiB", "123456" (bytes). KB/MB/GB are powers of 1000, KiB/MiB/GiB of 1024.
int64_t parseByteSize(std::string_view text);

// Budget mode: the largest dense rank (512, 256, ..., 8 or 0) whose compensators fit in what the budget
// leaves after the quantized weights (`fixed_bytes`: quantized bases plus untouched tensors), then the
// largest uniform routed-expert rank in what remains: dense layers first, as MiLo found them to gain the
// most per byte. Throws when the budget is below `fixed_bytes`.
RankPolicy policyForBudget(int64_t budget_bytes, int64_t fixed_bytes, const std::vector<MatrixFacts>& facts,
                           CompensatorFormat format, int compensator_group = 64);

// Compensator bytes of a rank assignment.
int64_t compensatorBytesFor(const std::vector<MatrixFacts>& facts, const std::vector<int>& ranks,
                            CompensatorFormat format, int compensator_group = 64);

}  // namespace moewb::quant

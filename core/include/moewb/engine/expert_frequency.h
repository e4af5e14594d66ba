// SPDX-License-Identifier: MIT
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace moewb::engine {

// Per MoE layer, how often each expert was among the top-k (all positions of all windows).
struct ExpertFrequency {
  struct Layer {
    int layer = 0;                // decoder layer index
    std::vector<int64_t> counts;  // per expert
  };
  std::vector<Layer> layers;  // MoE layers in order
  int64_t tokens = 0;
  int top_k = 0, num_experts = 0;
  // {"tokens","top_k","num_experts","layers":[{"layer","counts":[...]}]}
  nlohmann::json toJson() const;
  // layer,expert,count,fraction (fraction of tokens routing to the expert)
  std::string toCsv() const;
};

// A `moewb freq` file: the measurement and, when the JSON says so, the model and window length. The one
// reader and writer of these files: `moewb freq`, the rank policies (quant::ExpertFrequencies) and the
// GUI's frequency view all go through it, so a file means the same counts everywhere.
struct ExpertFrequencyFile {
  ExpertFrequency frequency;
  std::string model;  // checkpoint root ("model" of the JSON), "" when unknown
  int seq_len = 0;    // window length of the measurement, 0 when unknown
  // What `moewb freq --json` prints (before the device fields the command adds).
  nlohmann::json toJson() const;
};

// Reads `moewb freq --json` output or a CSV; the first non-blank character decides ('{': JSON).
//  JSON: {"layers":[{"layer":L,"counts":[C,...]},...]} with optional "tokens", "top_k", "num_experts",
//        "model", "seq_len" (other fields, e.g. the device, are ignored).
//  CSV:  rows "layer,expert,count[,fraction]" (`moewb freq --csv`, or three columns by hand), an optional
//        header line first; experts missing from a layer count 0. The fraction column is count / tokens,
//        from which the token count (and top-k) come back.
// Layers and counts are whole non-negative numbers; a layer appears once (JSON) and a layer/expert pair
// once (CSV); at least one layer. Layers come out in ascending order. Anything else throws moewb::Error
// naming `origin` (the file), the line or field at fault and what was expected.
ExpertFrequencyFile parseExpertFrequencyFile(std::string_view text, const std::string& origin);
// The same for the file at `path` (its name is the origin).
ExpertFrequencyFile loadExpertFrequencyFile(const std::filesystem::path& path);

}  // namespace moewb::engine

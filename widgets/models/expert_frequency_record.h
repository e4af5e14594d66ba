// SPDX-License-Identifier: MIT
#pragma once
#include <QString>
#include <string>

#include "heatmap/heatmap_data.h"
#include "moewb/engine/expert_frequency.h"
#include "moewb/quant/rank_policy.h"

namespace moewb::gui {

// Expert activation frequency as `moewb freq` measures it (counts per MoE layer and expert, tokens,
// top-k), plus where it came from. What the frequency view shows and exports, and what frequency-R
// rank policies read (as quant::ExpertFrequencies). A Qt-side view of core's engine::ExpertFrequencyFile:
// reading and writing the files is core's (moewb/engine/expert_frequency.h).
struct ExpertFrequencyRecord {
  engine::ExpertFrequency frequency;
  QString source;  // the text measured, or the file loaded
  QString model;   // checkpoint root ("model" of `moewb freq --json`), when known
  int seqLen = 0;  // window length of the measurement, when known

  // Tokens are unknown only for a three-column CSV (layer,expert,count).
  bool knowsTokens() const { return frequency.tokens > 0; }
  // Fraction of tokens routed to expert `expert` of the `moeIndex`-th MoE layer (count / tokens; the
  // MiLo Fig. 3 quantity, summing to top-k over a layer). Without a token count: the expert's share of
  // the layer's routing decisions.
  double fraction(std::size_t moeIndex, int expert) const;
  quant::ExpertFrequencies toPolicyFrequencies() const;
  engine::ExpertFrequencyFile toFile() const;
  // Exactly what `moewb freq --json` / `--csv` print for the same measurement (core's writer).
  std::string toJson() const;
  std::string toCsv() const;
};

// Reads `moewb freq --json` output or a CSV (`moewb freq --csv`: layer,expert,count,fraction, or the
// three-column layer,expert,count) with engine::loadExpertFrequencyFile. Throws moewb::Error naming the
// file and the line or field at fault.
ExpertFrequencyRecord loadExpertFrequencyRecord(const QString& path);

// Layers × experts, colour = fraction of tokens routed; the tooltip gives count, tokens and fraction.
HeatmapData frequencyHeatmap(const ExpertFrequencyRecord& record);

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#include "models/expert_frequency_record.h"

#include <QFile>
#include <cmath>

namespace moewb::gui {

double ExpertFrequencyRecord::fraction(std::size_t moeIndex, int expert) const {
  if (moeIndex >= frequency.layers.size()) return std::nan("");
  const auto& counts = frequency.layers[moeIndex].counts;
  if (expert < 0 || std::size_t(expert) >= counts.size()) return std::nan("");
  const double count = double(counts[std::size_t(expert)]);
  if (knowsTokens()) return count / double(frequency.tokens);
  double total = 0;
  for (int64_t c : counts) total += double(c);
  return total > 0 ? count / total : 0.0;
}

quant::ExpertFrequencies ExpertFrequencyRecord::toPolicyFrequencies() const {
  return quant::ExpertFrequencies::from(frequency);
}

engine::ExpertFrequencyFile ExpertFrequencyRecord::toFile() const {
  return {frequency, model.toStdString(), seqLen};
}

std::string ExpertFrequencyRecord::toJson() const {
  return toFile().toJson().dump(2) + "\n";
}

std::string ExpertFrequencyRecord::toCsv() const {
  return frequency.toCsv();
}

ExpertFrequencyRecord loadExpertFrequencyRecord(const QString& path) {
  // The core reads the file (the same parser as the rank policies and `moewb quantize --frequencies`).
  engine::ExpertFrequencyFile file = engine::loadExpertFrequencyFile(QFile::encodeName(path).toStdString());
  ExpertFrequencyRecord r;
  r.frequency = std::move(file.frequency);
  r.model = QString::fromStdString(file.model);
  r.seqLen = file.seq_len;
  r.source = path;
  return r;
}

HeatmapData frequencyHeatmap(const ExpertFrequencyRecord& record) {
  HeatmapData d;
  const engine::ExpertFrequency& f = record.frequency;
  d.metric = record.knowsTokens() ? QObject::tr("fraction of tokens routed")
                                  : QObject::tr("share of routing decisions");
  int experts = f.num_experts;
  for (const auto& l : f.layers) experts = std::max(experts, int(l.counts.size()));
  for (const auto& l : f.layers) d.rowLabels << QObject::tr("layer %1").arg(l.layer);
  for (int e = 0; e < experts; ++e) d.columnLabels << QStringLiteral("E%1").arg(e);
  d.values.assign(std::size_t(d.rows()) * std::size_t(experts), std::nanf(""));
  for (std::size_t i = 0; i < f.layers.size(); ++i)
    for (int e = 0; e < int(f.layers[i].counts.size()); ++e)
      d.values[i * std::size_t(experts) + std::size_t(e)] = float(record.fraction(i, e));
  // The tooltip works on a copy of the numbers: the record may be replaced while the map is shown.
  d.tooltip = [f, known = record.knowsTokens(), values = d.values, experts](int row, int column) {
    if (row < 0 || std::size_t(row) >= f.layers.size() || column < 0 || column >= experts) return QString();
    const auto& l = f.layers[std::size_t(row)];
    const int64_t count = std::size_t(column) < l.counts.size() ? l.counts[std::size_t(column)] : 0;
    const float v = values[std::size_t(row) * std::size_t(experts) + std::size_t(column)];
    if (known)
      return QObject::tr("layer %1, expert %2\n%3 of %4 tokens routed (top-%5)\nfraction %6")
          .arg(l.layer)
          .arg(column)
          .arg(count)
          .arg(f.tokens)
          .arg(f.top_k)
          .arg(formatValue(v));
    return QObject::tr("layer %1, expert %2\ncount %3\nshare of the layer's routing decisions %4")
        .arg(l.layer)
        .arg(column)
        .arg(count)
        .arg(formatValue(v));
  };
  return d;
}

}  // namespace moewb::gui

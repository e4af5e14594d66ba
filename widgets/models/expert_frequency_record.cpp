// SPDX-License-Identifier: MIT
#include "models/expert_frequency_record.h"

#include <QFile>
#include <QFileInfo>
#include <QStringList>
#include <cmath>
#include <nlohmann/json.hpp>

#include "moewb/error.h"

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
  quant::ExpertFrequencies f;
  for (const auto& layer : frequency.layers)
    f.counts[layer.layer] = std::vector<double>(layer.counts.begin(), layer.counts.end());
  return f;
}

std::string ExpertFrequencyRecord::toJson() const {
  nlohmann::json j = frequency.toJson();
  // The two fields app/cli/commands/freq.cpp adds to the core's JSON.
  if (!model.isEmpty()) j["model"] = model.toStdString();
  if (seqLen > 0) j["seq_len"] = seqLen;
  return j.dump(2) + "\n";
}

std::string ExpertFrequencyRecord::toCsv() const {
  return frequency.toCsv();
}

namespace {

ExpertFrequencyRecord fromJson(const QByteArray& text, const QString& path) {
  ExpertFrequencyRecord r;
  try {
    const auto j = nlohmann::json::parse(text.constData(), text.constData() + text.size());
    engine::ExpertFrequency& f = r.frequency;
    f.tokens = j.value("tokens", int64_t{0});
    f.top_k = j.value("top_k", 0);
    f.num_experts = j.value("num_experts", 0);
    for (const auto& layer : j.at("layers")) {
      engine::ExpertFrequency::Layer l;
      l.layer = layer.at("layer").get<int>();
      for (const auto& c : layer.at("counts")) l.counts.push_back(c.get<int64_t>());
      f.num_experts = std::max(f.num_experts, int(l.counts.size()));
      f.layers.push_back(std::move(l));
    }
    if (j.contains("model")) r.model = QString::fromStdString(j.at("model").get<std::string>());
    r.seqLen = j.value("seq_len", 0);
  } catch (const nlohmann::json::exception& e) {
    throw Error(QObject::tr("%1: expected the JSON of `moewb freq --json` "
                            "({\"tokens\",\"top_k\",\"layers\":[{\"layer\",\"counts\":[...]}]}): %2")
                    .arg(path, QString::fromUtf8(e.what()))
                    .toStdString());
  }
  return r;
}

ExpertFrequencyRecord fromCsv(const QByteArray& text, const QString& path) {
  ExpertFrequencyRecord r;
  engine::ExpertFrequency& f = r.frequency;
  const QList<QByteArray> lines = text.split('\n');
  for (int n = 0; n < lines.size(); ++n) {
    const QString line = QString::fromUtf8(lines[n]).trimmed();
    if (line.isEmpty() || (n == 0 && !line.front().isDigit())) continue;  // blank lines, the header
    const QStringList fields = line.split(QLatin1Char(','));
    bool okLayer = false, okExpert = false, okCount = false, okFraction = true;
    const int layer = fields.value(0).trimmed().toInt(&okLayer);
    const int expert = fields.value(1).trimmed().toInt(&okExpert);
    const qlonglong count = fields.value(2).trimmed().toLongLong(&okCount);
    const double fraction = fields.size() > 3 ? fields[3].trimmed().toDouble(&okFraction) : 0.0;
    if ((fields.size() != 3 && fields.size() != 4) || !okLayer || !okExpert || !okCount || !okFraction ||
        expert < 0 || expert > (1 << 20) || count < 0)
      throw Error(QObject::tr("%1:%2: expected 'layer,expert,count[,fraction]' with numbers")
                      .arg(path)
                      .arg(n + 1)
                      .toStdString());
    if (f.layers.empty() || f.layers.back().layer != layer) {
      for (const auto& l : f.layers)
        if (l.layer == layer)
          throw Error(QObject::tr("%1:%2: rows of layer %3 are not together")
                          .arg(path)
                          .arg(n + 1)
                          .arg(layer)
                          .toStdString());
      f.layers.push_back({layer, {}});
    }
    auto& counts = f.layers.back().counts;
    if (int(counts.size()) <= expert) counts.resize(std::size_t(expert) + 1, 0);
    counts[std::size_t(expert)] = count;
    f.num_experts = std::max(f.num_experts, expert + 1);
    // The fraction column is count / tokens: the token count comes back from any row with a count.
    if (fraction > 0 && count > 0 && f.tokens == 0) f.tokens = std::llround(double(count) / fraction);
  }
  if (f.layers.empty()) throw Error(QObject::tr("%1: no frequency rows").arg(path).toStdString());
  if (f.tokens > 0) {
    int64_t decisions = 0;
    for (int64_t c : f.layers.front().counts) decisions += c;
    f.top_k = int(std::llround(double(decisions) / double(f.tokens)));
  }
  return r;
}

}  // namespace

ExpertFrequencyRecord loadExpertFrequencyRecord(const QString& path) {
  QFile file(path);
  if (!file.open(QIODevice::ReadOnly))
    throw Error(QObject::tr("%1: cannot open the expert frequency file (%2)")
                    .arg(path, file.errorString())
                    .toStdString());
  const QByteArray text = file.readAll();
  const QByteArray trimmed = text.trimmed();
  ExpertFrequencyRecord r = trimmed.startsWith('{') ? fromJson(text, path) : fromCsv(text, path);
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

// SPDX-License-Identifier: MIT
#include "heatmap/heatmap_data.h"

#include <algorithm>

namespace moewb::gui {

ColourScale ColourScale::fit(const HeatmapData& data) {
  ColourScale s;
  s.log = data.logColour;
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (float v : data.values) {
    if (!std::isfinite(v) || (s.log && v <= 0.f)) continue;
    const float x = s.log ? std::log10(v) : v;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  if (!std::isfinite(lo)) lo = 0.f, hi = 1.f;
  if (hi <= lo) hi = lo + 1e-6f;  // a constant map still gets one colour, not a division by zero
  s.low = lo;
  s.high = hi;
  return s;
}

float ColourScale::normalise(float v) const {
  if (!std::isfinite(v)) return std::numeric_limits<float>::quiet_NaN();
  if (log) {
    if (v <= 0.f) return 0.f;
    v = std::log10(v);
  }
  return std::clamp((v - low) / (high - low), 0.f, 1.f);
}

}  // namespace moewb::gui

namespace moewb::gui {

QString formatValue(float v) {
  if (std::isnan(v)) return QStringLiteral("n/a");
  return QString::number(double(v), 'g', 5);
}

QString cellTooltip(const HeatmapData& data, int row, int column) {
  if (data.tooltip) return data.tooltip(row, column);
  QString text = QStringLiteral("%1 / %2\n").arg(data.rowLabels.value(row), data.columnLabels.value(column));
  const QString name = data.cellName(row, column);
  text += name.isEmpty() ? QStringLiteral("(no tensor)") : name;
  text += QStringLiteral("\n%1 = %2").arg(data.metric, formatValue(data.value(row, column)));
  return text;
}

int labelStride(double cellExtent, double labelExtent) {
  if (cellExtent <= 0) return 1 << 20;
  return std::max(1, int(std::ceil(labelExtent / cellExtent)));
}

}  // namespace moewb::gui

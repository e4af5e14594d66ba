// SPDX-License-Identifier: MIT
#pragma once
#include <QString>
#include <QStringList>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

namespace moewb::gui {

// What a heatmap shows, independent of how it is drawn: a grid of values with labels. The canvases
// (ImGui/OpenGL and the QPainter fallback) only read this, so models of any family map onto it.
struct HeatmapData {
  QString metric;                  // e.g. "kurtosis"; shown in the legend
  QStringList rowLabels;           // one per row (layers)
  QStringList columnLabels;        // one per column ("dense", "shared", "E0", ...)
  std::vector<float> values;       // rows * columns, row-major; NaN = no tensor in that cell
  std::vector<QString> cellNames;  // rows * columns, tensor name(s) shown in the tooltip
  bool logColour = false;          // colour by log10(value) (frequencies, abs-max span decades)
  // Tooltip of a cell where "labels, cell name, metric = value" does not fit the data (the attention
  // map's head, query token, key token and probability). Empty: that default.
  std::function<QString(int row, int column)> tooltip;
  // Labels drawn inside the grid at a cell's top corner: the titles of the blocks of a grid of maps
  // (the attention view's "head 3"), which row and column labels cannot carry. Right-aligned ones end
  // at the cell's right edge (the attention map puts them over the masked, empty corner).
  struct Annotation {
    int row = 0, column = 0;
    QString text;
    bool rightAligned = false;
  };
  std::vector<Annotation> annotations;

  int rows() const { return int(rowLabels.size()); }
  int columns() const { return int(columnLabels.size()); }
  bool empty() const { return rows() == 0 || columns() == 0; }
  float value(int row, int column) const {
    const std::size_t i = std::size_t(row) * std::size_t(columns()) + std::size_t(column);
    return i < values.size() ? values[i] : std::numeric_limits<float>::quiet_NaN();
  }
  QString cellName(int row, int column) const {
    const std::size_t i = std::size_t(row) * std::size_t(columns()) + std::size_t(column);
    return i < cellNames.size() ? cellNames[i] : QString();
  }
};

// Maps values to [0, 1] for colouring; finite values only, so empty cells do not stretch the scale.
struct ColourScale {
  float low = 0.f, high = 1.f;
  bool log = false;
  static ColourScale fit(const HeatmapData& data);
  // NaN for non-finite input (drawn as "no tensor").
  float normalise(float v) const;
};

}  // namespace moewb::gui

namespace moewb::gui {
// Text of the hover tooltip: position, tensor name(s) and the exact value.
QString cellTooltip(const HeatmapData& data, int row, int column);
// Number shown in tooltips and the legend (4 significant digits, no trailing zeros).
QString formatValue(float v);
// Every how many rows/columns a label fits, given the cell extent and the label's extent in pixels.
int labelStride(double cellExtent, double labelExtent);
}  // namespace moewb::gui

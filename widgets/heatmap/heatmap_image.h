// SPDX-License-Identifier: MIT
#pragma once
#include <QImage>
#include <cstddef>

#include "heatmap/heatmap_data.h"

namespace moewb::gui {

// Above this many cells both canvases draw the grid as one image (an OpenGL texture in the Dear ImGui
// canvas) instead of one rectangle per cell. Dear ImGui's draw lists use 16-bit indices, so about 16k
// rectangles fit in one list; an attention map of 4 heads over 512 tokens has a million cells. The
// largest layer × expert map (DeepSeek-V3, 58 × 256 = 14,848 cells) stays below and keeps its cell gaps.
constexpr std::size_t kCellImageThreshold = 15000;

inline bool drawsCellsAsImage(const HeatmapData& data) {
  return std::size_t(data.rows()) * std::size_t(data.columns()) > kCellImageThreshold;
}

// One pixel per cell (x = column, y = row), RGBA8888 so it uploads to OpenGL as is; cells without a
// value get the "no tensor" colour.
QImage heatmapCellImage(const HeatmapData& data, const ColourScale& scale, bool darkTheme);

}  // namespace moewb::gui

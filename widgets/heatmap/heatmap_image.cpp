// SPDX-License-Identifier: MIT
#include "heatmap/heatmap_image.h"

#include "heatmap/heatmap_colours.h"

namespace moewb::gui {

QImage heatmapCellImage(const HeatmapData& data, const ColourScale& scale, bool darkTheme) {
  QImage image(data.columns(), data.rows(), QImage::Format_RGBA8888);
  const QRgb empty = emptyCellColour(darkTheme).rgba();
  for (int r = 0; r < data.rows(); ++r) {
    auto* line = reinterpret_cast<uchar*>(image.scanLine(r));
    for (int c = 0; c < data.columns(); ++c) {
      const float t = scale.normalise(data.value(r, c));
      const QRgb rgb = std::isnan(t) ? empty : rampColour(t).rgba();
      uchar* px = line + 4 * c;  // RGBA8888 is byte-ordered R, G, B, A on every platform
      px[0] = uchar(qRed(rgb));
      px[1] = uchar(qGreen(rgb));
      px[2] = uchar(qBlue(rgb));
      px[3] = 255;
    }
  }
  return image;
}

}  // namespace moewb::gui

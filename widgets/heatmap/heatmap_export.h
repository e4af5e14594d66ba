// SPDX-License-Identifier: MIT
#pragma once
#include <QSize>
#include <QString>

#include "heatmap/heatmap_data.h"

namespace moewb::gui {

// Writes a heatmap to PNG or SVG (chosen by the file suffix), drawn by the QPainter canvas: the same
// picture whether the on-screen view uses OpenGL or not, and for views that were never shown (reports,
// headless runs). Written through QSaveFile, so a failed export leaves no truncated file.
bool exportHeatmapImage(const HeatmapData& data, const QString& path, QSize size = QSize(1200, 520),
                        QString* error = nullptr);

}  // namespace moewb::gui

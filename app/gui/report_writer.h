// SPDX-License-Identifier: MIT
#pragma once
#include <QString>

namespace moewb::gui {
class MainWindow;

// Writes a report folder: report.html and report.md (summary, heatmaps and the inspector's plots as PNG
// and SVG images, policy totals, last results) plus tensors.csv / tensors.json with every number, and what
// the engine views hold: the perplexity table (perplexity.csv and a section of both pages), the expert
// frequency map with expert-frequency.json/.csv, the first-token and K/V channel plots of the capture. The
// folder appears complete or not at all (written into a staging folder, then renamed).
bool writeReport(const QString& directory, MainWindow& window, QString* error);

}  // namespace moewb::gui

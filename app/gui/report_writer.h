// SPDX-License-Identifier: MIT
#pragma once
#include <QString>

namespace moewb::gui {
class MainWindow;
struct ReportData;

// Writes a report folder: report.html and report.md (summary, heatmaps, one tensor in depth — histogram,
// residual spectrum, error vs rank, convergence — policy totals, the last run with its settings) plus
// tensors.csv / tensors.json with every number, and the engine measurements: the perplexity table
// (perplexity.csv and a section of both pages), the expert frequency map with expert-frequency.json/.csv,
// the first-token and K/V channel plots of the capture. Every plot is rendered from `data` (see
// report_data.h) and its heading names the tensor, layer or run it shows. The folder appears complete or
// not at all (written into a staging folder, then renamed).
bool writeReport(const QString& directory, const ReportData& data, QString* error);
// The report of the window's session (collectReportData with the session's last analysed tensor).
bool writeReport(const QString& directory, MainWindow& window, QString* error);

}  // namespace moewb::gui

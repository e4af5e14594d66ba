// SPDX-License-Identifier: MIT
#pragma once
// What a report shows, gathered from the WorkbenchSession (never from the widgets on screen): the
// catalog and its statistics, ranks and policy totals, the last run with its own settings, the engine
// measurements and one tensor in depth. The report writer renders its plots from this data, so a report
// is the same whichever tensor, layer or page the window happens to show.
#include <QString>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "engine_jobs.h"
#include "models/expert_frequency_record.h"
#include "models/heatmap_layout.h"
#include "models/perplexity_table_model.h"
#include "moewb/catalog.h"
#include "moewb/engine/kv_capture.h"
#include "policy/policy_state.h"
#include "quant_settings.h"
#include "tensor_analysis.h"

namespace moewb::gui {
class WorkbenchSession;

// One catalog matrix's numbers (NaN / -1 where unknown).
struct ReportTensorRow {
  bool haveStats = false;
  double std = 0, absmax = 0, kurtosis = 0, fracGt3Sigma = 0;
  int rank = -1;     // assigned by the current policy (the editor's)
  int runRank = -1;  // the rank the last run used on this matrix (-1: not in the run)
  double relError = std::numeric_limits<double>::quiet_NaN();  // of the last run
};

// The last completed quantization run, described by its own settings (not the Jobs view's current ones).
struct ReportRun {
  QuantSettings settings;
  QString description;  // settings.describe()
  std::size_t matrices = 0;
  double meanRelError = 0, maxRelError = 0;
  QString worstTensor;
  // The rank policy the run used (empty for methods without ranks, or after reopening a project, whose
  // results are numbers only); the report draws the run's ranks under it, apart from the current policy.
  QString policy;
};

// One tensor in depth: its histogram (the analysis's, with the quantization grid, or the statistics'),
// and when an analysis of it exists, the residual spectrum, error vs rank and MiLo preview; the last
// run's convergence curve when that run quantized it with MiLo.
struct ReportTensorSection {
  std::size_t matrix = 0;
  QString name;  // the catalog matrix name
  int64_t rows = 0, cols = 0;
  double histLo = 0, histHi = 0;
  std::vector<uint64_t> histogram;
  std::optional<TensorAnalysis> analysis;  // of `matrix`
  std::optional<int> assignedRank;
  double tau = 0.5;              // the residual rank is counted at this τ
  std::vector<double> runCurve;  // ε_t of the last run on this tensor (MiLo), empty otherwise
  int runRank = 0;
};

// The K/V capture, with the layer whose channel plots the report shows (named in their titles).
struct ReportKvSection {
  std::shared_ptr<const engine::KvCapture> capture;
  QString source;  // "prompt of 12 token(s)" or the file it was read from
  int layer = 0;   // the layer with the most prominent key channel (core's peak |max| / mean rms)
  double outlierFactor = 0;
};

struct ReportData {
  QString modelPath;
  std::shared_ptr<const ModelCatalog> catalog;
  QString summaryHtml;                   // the summary view's page
  std::vector<ReportTensorRow> tensors;  // per catalog matrix
  // Heatmap values per catalog matrix (HeatmapPanel::metricValues), for the metrics the report draws.
  std::vector<double> kurtosisValues, rankValues, errorValues;
  std::vector<double> runRankValues;  // the last run's ranks (NaN where it did not quantize)
  PolicyState policy;
  PolicyEvaluation totals;  // of `policy`; !ok when it could not be evaluated
  std::optional<ReportRun> lastRun;
  std::optional<ReportTensorSection> tensor;
  std::optional<ExpertFrequencyRecord> frequency;
  std::optional<ReportKvSection> kv;
  std::vector<PerplexityRow> perplexity;
  PerplexityRequest perplexitySettings;  // of `perplexity`
};

// Which tensor the in-depth section shows: `tensor` when given (by catalog index), else the session's
// last analysed tensor; none when neither. A tensor without an analysis still gets its statistics'
// histogram and the last run's curve. The policy totals are the session's last evaluation of its policy
// state, or evaluated here (core's rank assignment) when no editor evaluated it.
ReportData collectReportData(const WorkbenchSession& session, std::optional<std::size_t> tensor = {});

}  // namespace moewb::gui

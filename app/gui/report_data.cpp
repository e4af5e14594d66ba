// SPDX-License-Identifier: MIT
#include "report_data.h"

#include <cmath>

#include "heatmap_panel.h"
#include "moewb/engine/kv_stats.h"
#include "policy_bridge.h"
#include "summary_panel.h"
#include "workbench_session.h"

namespace moewb::gui {

namespace {

std::optional<ReportRun> lastRunOf(const WorkbenchSession& session, const ModelCatalog& catalog) {
  const auto& results = session.results();
  if (results.empty()) return std::nullopt;
  ReportRun run;
  run.settings = session.resultSettings();
  run.description = run.settings.describe();
  run.matrices = results.size();
  double sum = 0;
  std::size_t counted = 0;
  for (const auto& [matrix, r] : results) {
    if (!std::isfinite(r.relError)) continue;
    sum += r.relError;
    ++counted;
    if (r.relError >= run.maxRelError) {
      run.maxRelError = r.relError;
      run.worstTensor = QString::fromStdString(catalog.matrices().at(matrix).name);
    }
  }
  run.meanRelError = counted ? sum / double(counted) : 0;
  if (const auto q = session.quantization()) run.policy = QString::fromStdString(q->policy);
  return run;
}

std::optional<ReportTensorSection> tensorSection(const WorkbenchSession& session, const ModelCatalog& catalog,
                                                 std::optional<std::size_t> matrix) {
  const TensorAnalysis* analysed = session.tensorAnalysis();
  if (!matrix && analysed) matrix = analysed->matrix;
  if (!matrix || *matrix >= catalog.matrices().size()) return std::nullopt;
  ReportTensorSection t;
  t.matrix = *matrix;
  const WeightMatrix& m = catalog.matrices()[*matrix];
  t.name = QString::fromStdString(m.name);
  t.rows = m.rows;
  t.cols = m.cols;
  if (analysed && analysed->matrix == *matrix) {
    t.analysis = *analysed;
    t.histLo = analysed->histLo;
    t.histHi = analysed->histHi;
    t.histogram = analysed->histogram;
  } else if (const TensorStats* s = session.matrixStats(*matrix); s && !s->histogram.empty()) {
    t.histLo = s->hist_lo;
    t.histHi = s->hist_hi;
    t.histogram = s->histogram;
  }
  if (*matrix < session.ranks().size() && session.ranks()[*matrix] >= 0)
    t.assignedRank = session.ranks()[*matrix];
  if (const auto it = session.results().find(*matrix); it != session.results().end()) {
    t.runCurve = it->second.curve;
    t.runRank = it->second.rank;
  }
  return t;
}

std::optional<ReportKvSection> kvSection(const WorkbenchSession& session) {
  const auto capture = session.engine()->kvCapture();
  if (!capture || capture->layers <= 0) return std::nullopt;
  ReportKvSection kv;
  kv.capture = capture;
  kv.source = session.engine()->kvSource();
  kv.outlierFactor = engine::kDefaultOutlierFactor;
  // The layer where a key channel stands out most: the outliers KV-cache quantizers care about.
  double best = -1;
  for (int l = 0; l < capture->layers; ++l) {
    const engine::KvLayerChannels c = engine::kvLayerChannels(*capture, l, kv.outlierFactor);
    if (c.peak_key_over_rms > best) {
      best = c.peak_key_over_rms;
      kv.layer = l;
    }
  }
  return kv;
}

}  // namespace

ReportData collectReportData(const WorkbenchSession& session, std::optional<std::size_t> tensor) {
  ReportData d;
  d.catalog = session.catalog();
  d.modelPath = session.modelPath();
  if (!d.catalog) return d;
  const ModelCatalog& catalog = *d.catalog;
  d.summaryHtml = SummaryPanel::buildHtml(session);

  const std::size_t n = catalog.matrices().size();
  d.tensors.resize(n);
  d.errorValues.assign(n, std::nan(""));
  d.runRankValues.assign(n, std::nan(""));
  for (std::size_t i = 0; i < n; ++i) {
    ReportTensorRow& row = d.tensors[i];
    if (const TensorStats* s = session.matrixStats(i)) {
      row.haveStats = true;
      row.std = s->std;
      row.absmax = s->absmax;
      row.kurtosis = s->kurtosis;
      row.fracGt3Sigma = s->frac_gt3sigma;
    }
    row.rank = i < session.ranks().size() ? session.ranks()[i] : -1;
    // The completed run's errors only: a run in progress is not the run the report describes.
    if (const auto it = session.results().find(i); it != session.results().end()) {
      row.relError = it->second.relError;
      row.runRank = it->second.rank;
      d.errorValues[i] = it->second.relError;
      d.runRankValues[i] = it->second.rank;
    }
  }
  d.kurtosisValues = HeatmapPanel::metricValues(session, HeatmapMetric::Kurtosis);
  d.rankValues = HeatmapPanel::metricValues(session, HeatmapMetric::AssignedRank);

  d.policy = session.policyState();
  if (const PolicyEvaluation* e = session.policyEvaluation()) {
    d.totals = *e;
  } else {
    // No editor evaluated the session's policy (a session without a window): the same core evaluation.
    const QuantSettings settings = session.results().empty() ? QuantSettings{} : session.resultSettings();
    const auto context = makePolicyContext(catalog, session.stats(), settings, session.expertFrequencies());
    d.totals = evaluatePolicy(*context, d.policy);
  }

  d.lastRun = lastRunOf(session, catalog);
  d.tensor = tensorSection(session, catalog, tensor);
  if (const ExpertFrequencyRecord* f = session.frequencyRecord()) d.frequency = *f;
  d.kv = kvSection(session);
  d.perplexity = session.engine()->perplexityRows();
  d.perplexitySettings = session.engine()->perplexitySettings();
  return d;
}

}  // namespace moewb::gui

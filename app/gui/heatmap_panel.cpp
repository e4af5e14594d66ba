// SPDX-License-Identifier: MIT
#include "heatmap_panel.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QLabel>
#include <QVBoxLayout>
#include <cmath>

#include "heatmap/heatmap_view.h"
#include "workbench_session.h"

namespace moewb::gui {

HeatmapPanel::HeatmapPanel(WorkbenchSession* session, QWidget* parent)
    : QWidget(parent),
      session_(session),
      metric_(new QComboBox(this)),
      proj_(new QComboBox(this)),
      view_(new HeatmapView(this)) {
  for (HeatmapMetric m : allHeatmapMetrics()) metric_->addItem(heatmapMetricName(m), int(m));
  proj_->addItem(tr("all projections"), -1);
  for (Proj p : {Proj::Gate, Proj::Up, Proj::Down, Proj::Q, Proj::K, Proj::V, Proj::O})
    proj_->addItem(QString::fromUtf8(projName(p).data(), qsizetype(projName(p).size())), int(p));
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Metric:"), this));
  bar->addWidget(metric_);
  bar->addWidget(new QLabel(tr("Tensors:"), this));
  bar->addWidget(proj_);
  auto* hint = new QLabel(tr("wheel: zoom · middle/Alt-drag: pan · drag: select range · Shift-drag: lasso · "
                             "right-click: set ranks"),
                          this);
  hint->setEnabled(false);
  bar->addStretch();
  bar->addWidget(hint);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(bar);
  layout->addWidget(view_, 1);

  // Statistics rows and results may arrive hundreds of times a second; redraw at most every 150 ms.
  refresh_.setSingleShot(true);
  refresh_.setInterval(150);
  connect(&refresh_, &QTimer::timeout, this, &HeatmapPanel::refreshNow);
  connect(metric_, &QComboBox::currentIndexChanged, this, &HeatmapPanel::refreshNow);
  connect(proj_, &QComboBox::currentIndexChanged, this, [this] {
    rebuildLayout();
    refreshNow();
  });
  connect(session_, &WorkbenchSession::modelOpened, this, [this] {
    rebuildLayout();
    refreshNow();
  });
  for (auto signal : {&WorkbenchSession::statsRowsArrived, &WorkbenchSession::statsFinished,
                      &WorkbenchSession::resultsChanged, &WorkbenchSession::ranksChanged,
                      &WorkbenchSession::frequenciesChanged})
    connect(session_, signal, this, &HeatmapPanel::scheduleRefresh);
  connect(session_, &WorkbenchSession::resultArrived, this, &HeatmapPanel::scheduleRefresh);
  connect(view_, &HeatmapView::cellClicked, this, [this](int row, int column) {
    if (layout_.cellMatrices.empty()) return;
    const auto& members = layout_.matricesAt(row, column);
    if (!members.empty()) emit matrixActivated(members.front());
  });
  connect(view_, &HeatmapView::setRankRequested, this, [this](std::vector<QPoint> cells) {
    const auto matrices = matricesOf(cells);
    if (matrices.empty()) return;
    bool ok = false;
    const int rank = QInputDialog::getInt(this, tr("Set compensator rank"),
                                          tr("Rank for %n tensor(s):", nullptr, int(matrices.size())), 16, 0,
                                          4096, 1, &ok);
    if (ok) emit rankOverrideRequested(matrices, rank);
  });
  connect(view_, &HeatmapView::clearRankRequested, this, [this](std::vector<QPoint> cells) {
    const auto matrices = matricesOf(cells);
    if (!matrices.empty()) emit rankOverrideCleared(matrices);
  });
}

void HeatmapPanel::setMetric(HeatmapMetric metric) {
  metric_->setCurrentIndex(metric_->findData(int(metric)));
}
HeatmapMetric HeatmapPanel::metric() const {
  return HeatmapMetric(metric_->currentData().toInt());
}

void HeatmapPanel::scheduleRefresh() {
  if (!refresh_.isActive()) refresh_.start();
}

void HeatmapPanel::rebuildLayout() {
  const auto catalog = session_->catalog();
  if (!catalog) return;
  const int proj = proj_->currentData().toInt();
  layout_ = buildHeatmapLayout(*catalog, proj < 0 ? std::nullopt : std::optional<Proj>(Proj(proj)));
}

std::vector<double> HeatmapPanel::metricValues(const WorkbenchSession& session, HeatmapMetric metric) {
  const auto catalog = session.catalog();
  if (!catalog) return {};
  const std::size_t n = catalog->matrices().size();
  std::vector<double> v(n, std::nan(""));
  // While a run is going its fresh results show; otherwise the last completed run's.
  const auto& results = session.quantizationRunning() ? session.pendingResults() : session.results();
  for (std::size_t i = 0; i < n; ++i) {
    switch (metric) {
      case HeatmapMetric::RelativeError:
        if (auto it = results.find(i); it != results.end()) v[i] = it->second.relError;
        break;
      case HeatmapMetric::AssignedRank:
        if (i < session.ranks().size() && session.ranks()[i] >= 0) v[i] = session.ranks()[i];
        break;
      case HeatmapMetric::ExpertFrequency:
        break;
      default: {
        const TensorStats* s = session.matrixStats(i);
        if (!s) break;
        v[i] = metric == HeatmapMetric::Kurtosis ? s->kurtosis
               : metric == HeatmapMetric::Std    ? s->std
               : metric == HeatmapMetric::AbsMax ? s->absmax
                                                 : s->frac_gt3sigma;
      }
    }
  }
  return v;
}

void HeatmapPanel::refreshNow() {
  refresh_.stop();
  const auto catalog = session_->catalog();
  if (!catalog) return;
  if (layout_.cellMatrices.empty()) rebuildLayout();
  const HeatmapMetric m = metric();
  // Frequencies as the fraction of tokens routed to each expert (the frequency view's numbers).
  std::vector<std::vector<double>> shares;
  if (const ExpertFrequencyRecord* record = session_->frequencyRecord()) {
    const auto& layers = record->frequency.layers;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const int layer = layers[i].layer;
      if (layer < 0) continue;
      if (std::size_t(layer) >= shares.size()) shares.resize(std::size_t(layer) + 1);
      for (int e = 0; e < int(layers[i].counts.size()); ++e)
        shares[std::size_t(layer)].push_back(record->fraction(i, e));
    }
  }
  view_->setData(
      fillHeatmap(*catalog, layout_, m, metricValues(*session_, m), shares.empty() ? nullptr : &shares));
}

std::vector<std::size_t> HeatmapPanel::matricesOf(const std::vector<QPoint>& cells) const {
  std::vector<std::size_t> out;
  for (QPoint c : cells) {
    if (c.y() >= layout_.rows() || c.x() >= layout_.columns()) continue;
    const auto& members = layout_.matricesAt(c.y(), c.x());
    out.insert(out.end(), members.begin(), members.end());
  }
  return out;
}

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#include "inspector_panel.h"

#include <QCheckBox>
#include <QDoubleSpinBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPointer>
#include <QSpinBox>

#include "charts/convergence_plot.h"
#include "charts/histogram_plot.h"
#include "charts/xy_plot.h"
#include "moewb/quant/analysis.h"
#include "workbench_session.h"

namespace moewb::gui {

InspectorPanel::InspectorPanel(WorkbenchSession* session, QWidget* parent)
    : QWidget(parent),
      session_(session),
      title_(new QLabel(tr("Select a tensor in the table or the heatmap"), this)),
      bits_(new QSpinBox(this)),
      tau_(new QDoubleSpinBox(this)),
      logCounts_(new QCheckBox(tr("log counts"), this)),
      histogram_(new HistogramPlot(this)),
      spectrum_(new XyPlot(QStringLiteral("spectrum"), this)),
      errorRank_(new XyPlot(QStringLiteral("error-vs-rank"), this)),
      convergence_(new ConvergencePlot(this)) {
  title_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  QFont f = title_->font();
  f.setBold(true);
  title_->setFont(f);
  bits_->setRange(2, 8);
  bits_->setValue(3);
  bits_->setSuffix(tr(" bits"));
  tau_->setRange(0.01, 1.0);
  tau_->setSingleStep(0.05);
  tau_->setValue(0.5);
  tau_->setPrefix(QStringLiteral("τ = "));
  auto* bar = new QHBoxLayout;
  bar->addWidget(title_, 1);
  bar->addWidget(new QLabel(tr("Grid:"), this));
  bar->addWidget(bits_);
  bar->addWidget(tau_);
  bar->addWidget(logCounts_);
  auto* grid = new QGridLayout;
  grid->addWidget(histogram_, 0, 0);
  grid->addWidget(spectrum_, 0, 1);
  grid->addWidget(errorRank_, 1, 0);
  grid->addWidget(convergence_, 1, 1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(bar);
  layout->addLayout(grid, 1);
  spectrum_->setTitle(tr("Residual spectrum"));
  errorRank_->setTitle(tr("Error vs compensator rank"));

  connect(logCounts_, &QCheckBox::toggled, histogram_, &HistogramPlot::setLogCounts);
  connect(bits_, &QSpinBox::valueChanged, this, &InspectorPanel::startAnalysis);
  connect(tau_, &QDoubleSpinBox::valueChanged, this, &InspectorPanel::showAnalysis);
  connect(session_->jobs(), &JobRunner::jobFinished, this,
          [this](int id, JobState state, const QString&) { onJobFinished(id, state); });
  connect(session_, &WorkbenchSession::modelOpened, this, [this] {
    if (job_) session_->jobs()->cancel(job_);
    matrix_.reset();
    analysis_.reset();
    pending_.reset();
    ++request_;
    title_->setText(tr("Select a tensor in the table or the heatmap"));
    histogram_->clear();
    spectrum_->clear();
    errorRank_->clear();
    convergence_->clear();
  });
  connect(session_, &WorkbenchSession::statsFinished, this, &InspectorPanel::showHistogram);
  connect(session_, &WorkbenchSession::resultsChanged, this, &InspectorPanel::showConvergence);
}

void InspectorPanel::showMatrix(std::size_t matrix) {
  const auto catalog = session_->catalog();
  if (!catalog || matrix >= catalog->matrices().size()) return;
  if (matrix_ == matrix && (analysis_ || job_)) return;  // shown, or on its way
  matrix_ = matrix;
  analysis_.reset();
  const WeightMatrix& m = catalog->matrices()[matrix];
  title_->setText(
      QStringLiteral("%1   [%2 × %3]").arg(QString::fromStdString(m.name)).arg(m.rows).arg(m.cols));
  showHistogram();
  showConvergence();
  spectrum_->clear();
  errorRank_->clear();
  startAnalysis();
}

void InspectorPanel::startAnalysis() {
  const auto catalog = session_->catalog();
  if (!catalog || !matrix_) return;
  // A new request makes the running (or queued) one stale: stop it rather than let it finish unseen.
  if (job_) session_->jobs()->cancel(job_);
  pending_.reset();
  const int request = ++request_;
  const std::size_t matrix = *matrix_;
  const int bits = bits_->value();
  const auto& ranks = session_->ranks();
  const int rank = matrix < ranks.size() && ranks[matrix] > 0 ? ranks[matrix] : 16;
  QPointer<InspectorPanel> self(this);
  auto work = [self, catalog, matrix, bits, rank, request](const ProgressFn& progress) {
    TensorAnalysis a = analyseMatrix(*catalog, matrix, bits, 64, rank, progress);
    // To the GUI thread; kept only while it is still the latest request (the panel may be gone).
    QMetaObject::invokeMethod(
        self.data(),
        [self, request, a = std::move(a)]() mutable {
          if (self && self->request_ == request) self->pending_ = std::move(a);
        },
        Qt::QueuedConnection);
  };
  const QString name = QString::fromStdString(catalog->matrices()[matrix].name);
  job_ = session_->jobs()->submit(tr("Analyse %1 (%2-bit)").arg(name).arg(bits), std::move(work));
}

void InspectorPanel::onJobFinished(int id, JobState state) {
  if (id == 0 || id != job_) return;  // another job, or an analysis that was superseded
  job_ = 0;
  // The result was posted before the job finished (same thread, queued in order); only a completed job
  // of the latest request is shown.
  std::optional<TensorAnalysis> result = std::move(pending_);
  pending_.reset();
  if (state != JobState::Done || !result || !matrix_ || result->matrix != *matrix_) return;
  analysis_ = std::move(result);
  session_->setTensorAnalysis(*analysis_);  // the report's tensor section shows it, named
  showAnalysis();
}

void InspectorPanel::showHistogram() {
  if (!matrix_) return;
  // Statistics give a first histogram at once; the analysis replaces it with a finer one and the grid.
  if (analysis_) {
    histogram_->setHistogram(analysis_->histLo, analysis_->histHi, analysis_->histogram);
  } else if (const TensorStats* s = session_->matrixStats(*matrix_); s && !s->histogram.empty()) {
    histogram_->setHistogram(s->hist_lo, s->hist_hi, s->histogram);
    histogram_->setGrid({}, QString());
  }
  if (analysis_)
    histogram_->setGrid(analysis_->gridLevels, tr("%1-bit grid (widest group: row %2, group %3)")
                                                   .arg(analysis_->bits)
                                                   .arg(analysis_->gridRow)
                                                   .arg(analysis_->gridGroup));
}

void InspectorPanel::showAnalysis() {
  if (!analysis_) return;
  showHistogram();
  const auto& sv = analysis_->singularValues;
  const int rank = quant::rankAtTau(sv, tau_->value());
  showResidualSpectrum(*spectrum_, sv,
                       sv.empty() ? std::nullopt : std::optional<double>(tau_->value() * sv.front()), rank);
  spectrum_->setTitle(tr("Residual spectrum (HQQ %1-bit): rank %2 at τ = %3")
                          .arg(analysis_->bits)
                          .arg(rank)
                          .arg(tau_->value()));
  std::optional<int> assigned;
  if (matrix_ && *matrix_ < session_->ranks().size() && session_->ranks()[*matrix_] >= 0)
    assigned = session_->ranks()[*matrix_];
  showErrorVsRank(*errorRank_, analysis_->ranks, analysis_->errorAtRank, assigned);
  showConvergence();
  emit analysisShown();
}

void InspectorPanel::showConvergence() {
  convergence_->clear();
  if (!matrix_) return;
  // The curve of the last completed run when it quantized this tensor with MiLo; otherwise the preview
  // the analysis computed for this tensor alone.
  const auto& results = session_->results();
  const auto it = results.find(*matrix_);
  if (it != results.end() && !it->second.curve.empty()) {
    const QString name = tr("last run, rank %1").arg(it->second.rank);
    for (std::size_t i = 0; i < it->second.curve.size(); ++i)
      convergence_->addPoint(name, int(i) + 1, it->second.curve[i]);
    return;
  }
  if (analysis_ && analysis_->matrix == *matrix_ && !analysis_->miloCurve.empty()) {
    const QString name = tr("MiLo preview, rank %1 (stored: %2)")
                             .arg(analysis_->miloRank)
                             .arg(analysis_->miloError, 0, 'f', 4);
    for (std::size_t i = 0; i < analysis_->miloCurve.size(); ++i)
      convergence_->addPoint(name, int(i) + 1, analysis_->miloCurve[i]);
  }
}

}  // namespace moewb::gui

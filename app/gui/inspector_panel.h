// SPDX-License-Identifier: MIT
#pragma once
#include <QWidget>
#include <optional>

#include "jobs/job_runner.h"
#include "tensor_analysis.h"

class QLabel;
class QSpinBox;
class QDoubleSpinBox;
class QCheckBox;

namespace moewb::gui {
class WorkbenchSession;
class HistogramPlot;
class XyPlot;
class ConvergencePlot;

// One tensor in depth: value histogram with the quantization grid, residual spectrum with the τ line,
// error vs compensator rank and its MiLo convergence curve. The analysis is a job of the session's
// JobRunner (progress and Cancel in the jobs view, like every other computation); selecting another
// tensor or grid cancels the running analysis, and a result that is not of the latest request, or whose
// job was cancelled, is dropped.
class InspectorPanel : public QWidget {
  Q_OBJECT
 public:
  InspectorPanel(WorkbenchSession* session, QWidget* parent = nullptr);
  void showMatrix(std::size_t matrix);
  std::optional<std::size_t> currentMatrix() const { return matrix_; }
  bool analysisRunning() const { return job_ != 0; }
  int analysisJob() const { return job_; }  // the runner's id of the running or queued analysis, 0 if none
  // The analysis shown (of currentMatrix()), when one has arrived.
  const TensorAnalysis* analysis() const { return analysis_ ? &*analysis_ : nullptr; }
  HistogramPlot* histogram() const { return histogram_; }
  XyPlot* spectrum() const { return spectrum_; }
  XyPlot* errorVsRank() const { return errorRank_; }
  ConvergencePlot* convergence() const { return convergence_; }

 signals:
  void analysisShown();

 private:
  void startAnalysis();
  void onJobFinished(int id, JobState state);
  void showAnalysis();
  void showHistogram();
  void showConvergence();
  WorkbenchSession* session_;
  QLabel* title_;
  QSpinBox* bits_;
  QDoubleSpinBox* tau_;
  QCheckBox* logCounts_;
  HistogramPlot* histogram_;
  XyPlot* spectrum_;
  XyPlot* errorRank_;
  ConvergencePlot* convergence_;
  std::optional<std::size_t> matrix_;
  std::optional<TensorAnalysis> analysis_;
  std::optional<TensorAnalysis> pending_;  // posted by the running job; shown when the job is Done
  int job_ = 0;
  int request_ = 0;  // numbers analyses so a late one for another tensor is ignored
};

}  // namespace moewb::gui

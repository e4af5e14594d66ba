// SPDX-License-Identifier: MIT
#pragma once
#include <QWidget>

#include "quant_settings.h"

class QComboBox;
class QCheckBox;
class QPushButton;
class QLabel;

namespace moewb::gui {
class WorkbenchSession;
class JobView;
class ConvergencePlot;
class MethodOptionsForm;

// Quantization settings, Run / Cancel, the live MiLo convergence curve and the job queue with history.
class JobsPanel : public QWidget {
  Q_OBJECT
 public:
  JobsPanel(WorkbenchSession* session, QWidget* parent = nullptr);
  QuantSettings settings() const;
  void setSettings(const QuantSettings& s);
  bool onlyFiltered() const;
  ConvergencePlot* convergence() const { return convergence_; }
  QComboBox* methodBox() const { return method_; }
  MethodOptionsForm* optionsForm() const { return options_; }
  QPushButton* runButton() const { return run_; }
  QPushButton* cancelButton() const { return cancel_; }

 signals:
  void runRequested();
  void settingsChanged();

 private:
  void updateState();
  WorkbenchSession* session_;
  QComboBox* method_;
  MethodOptionsForm* options_;
  QComboBox* device_;
  QCheckBox* onlyFiltered_;
  QPushButton* run_;
  QPushButton* cancel_;
  QLabel* summary_;
  ConvergencePlot* convergence_;
  JobView* jobView_;
};

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#pragma once
#include <QWidget>

#include "quant_settings.h"

class QComboBox;
class QSpinBox;
class QCheckBox;
class QPushButton;
class QLabel;

namespace moewb::gui {
class WorkbenchSession;
class JobView;
class ConvergencePlot;

// Quantization settings, Run / Cancel, the live MiLo convergence curve and the job queue with history.
class JobsPanel : public QWidget {
  Q_OBJECT
 public:
  JobsPanel(WorkbenchSession* session, QWidget* parent = nullptr);
  QuantSettings settings() const;
  void setSettings(const QuantSettings& s);
  bool onlyFiltered() const;
  ConvergencePlot* convergence() const { return convergence_; }
  QPushButton* runButton() const { return run_; }
  QPushButton* cancelButton() const { return cancel_; }

 signals:
  void runRequested();
  void settingsChanged();

 private:
  void updateState();
  WorkbenchSession* session_;
  QComboBox* method_;
  QSpinBox* bits_;
  QSpinBox* group_;
  QSpinBox* iterations_;
  QComboBox* compensator_;
  QComboBox* device_;
  QCheckBox* onlyFiltered_;
  QPushButton* run_;
  QPushButton* cancel_;
  QLabel* summary_;
  ConvergencePlot* convergence_;
  JobView* jobView_;
};

}  // namespace moewb::gui

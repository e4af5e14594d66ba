// SPDX-License-Identifier: MIT
#pragma once
#include <QWidget>

class QLineEdit;
class QSpinBox;
class QPushButton;
class QLabel;

namespace moewb::gui {
class WorkbenchSession;
class HeatmapView;
class JobStatusLine;

// Expert activation frequency (MiLo Fig. 3): routes a text through the model in the background (the
// core's measureExpertFrequency, as `moewb freq`) or loads `moewb freq --json/--csv` output, and shows
// MoE layers × experts coloured by the fraction of tokens routed, with counts on hover. The result is the
// session's frequencies: the heatmap metric and frequency-R rank policies use it.
class FrequencyPanel : public QWidget {
  Q_OBJECT
 public:
  FrequencyPanel(WorkbenchSession* session, QWidget* parent = nullptr);

  void setTextFile(const QString& path);
  QString textFile() const;
  void setWindows(int seqLen, int maxWindows);
  // Starts the measurement with the panel's settings; 0 (and the reason on the status line) when it
  // cannot start.
  int run();
  bool loadFile(const QString& path, QString* error = nullptr);
  bool exportCsv(const QString& path, QString* error = nullptr) const;
  bool exportJson(const QString& path, QString* error = nullptr) const;
  bool exportImage(const QString& path, QString* error = nullptr) const;  // .png or .svg

  HeatmapView* view() const { return view_; }
  QPushButton* runButton() const { return run_; }
  QPushButton* cancelButton() const { return cancel_; }
  JobStatusLine* statusLine() const { return status_; }

 public slots:
  void loadDialog();

 private:
  void refresh();
  void updateButtons();
  void exportDialog(const QString& kind);
  WorkbenchSession* session_;
  QLineEdit* text_;
  QSpinBox* seqLen_;
  QSpinBox* maxWindows_;
  QPushButton* run_;
  QPushButton* cancel_;
  QPushButton* exportCsv_;
  QPushButton* exportJson_;
  QPushButton* exportImage_;
  QLabel* summary_;
  JobStatusLine* status_;
  HeatmapView* view_;
};

}  // namespace moewb::gui

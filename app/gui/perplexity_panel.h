// SPDX-License-Identifier: MIT
#pragma once
#include <QWidget>

#include "engine_jobs.h"

class QLineEdit;
class QSpinBox;
class QCheckBox;
class QListWidget;
class QPushButton;
class QLabel;
class QTableView;

namespace moewb::gui {
class WorkbenchSession;
class JobStatusLine;
class PerplexityTableModel;

// Perplexity comparison (as `moewb eval`): the original model and compressed variants — the session's
// last quantization run in memory, export folders, quick specs like rtn:3 / hqq:3 / milo:3:uniform-16 —
// evaluated on a text in the background; a table of perplexity, tokens scored, weights as stored and
// Δ vs the original, copied or exported as CSV / Markdown and written into the report.
class PerplexityPanel : public QWidget {
  Q_OBJECT
 public:
  PerplexityPanel(WorkbenchSession* session, QWidget* parent = nullptr);

  PerplexityRequest request() const;
  void setRequest(const PerplexityRequest& request);
  int run();  // 0 and the reason on the status line when it cannot start
  PerplexityTableModel* table() const { return model_; }
  QTableView* tableView() const { return view_; }
  bool exportTable(const QString& path, QString* error = nullptr) const;  // .csv or .md
  QPushButton* runButton() const { return run_; }
  QPushButton* cancelButton() const { return cancel_; }
  JobStatusLine* statusLine() const { return status_; }

 private:
  void showRows();
  void updateButtons();
  WorkbenchSession* session_;
  QLineEdit* text_;
  QSpinBox* seqLen_;
  QSpinBox* maxWindows_;
  QCheckBox* original_;
  QCheckBox* lastRun_;
  QListWidget* folders_;
  QLineEdit* specs_;
  QPushButton* run_;
  QPushButton* cancel_;
  QLabel* settings_;
  JobStatusLine* status_;
  PerplexityTableModel* model_;
  QTableView* view_;
};

}  // namespace moewb::gui

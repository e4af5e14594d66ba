// SPDX-License-Identifier: MIT
#pragma once
#include <QWidget>

#include "engine_jobs.h"

class QLineEdit;
class QSpinBox;
class QPushButton;
class QPlainTextEdit;
class QLabel;

namespace moewb::gui {
class WorkbenchSession;
class JobStatusLine;

// "Try it": a prompt continued by the open model (greedy, original weights) in the background, the text
// growing as tokens arrive, with the prefill / decode speed and the KV cache it took — `moewb generate`.
// Stop keeps the text generated so far.
class TryItPanel : public QWidget {
  Q_OBJECT
 public:
  TryItPanel(WorkbenchSession* session, QWidget* parent = nullptr);

  GenerationRequest request() const;
  void setRequest(const GenerationRequest& request);
  int run();  // 0 and the reason on the status line when it cannot start
  QPushButton* generateButton() const { return generate_; }
  QPushButton* stopButton() const { return stop_; }
  QPlainTextEdit* output() const { return output_; }
  QLabel* speeds() const { return speeds_; }
  JobStatusLine* statusLine() const { return status_; }

 private:
  void updateButtons();
  void showText();
  void showSpeeds();
  WorkbenchSession* session_;
  QLineEdit* prompt_;
  QSpinBox* maxNewTokens_;
  QPushButton* generate_;
  QPushButton* stop_;
  QPlainTextEdit* output_;
  QLabel* speeds_;
  JobStatusLine* status_;
};

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#pragma once
#include <QObject>
#include <QString>
#include <QTimer>

namespace moewb::gui {
class MainWindow;

// `moewb-gui --screenshot FILE --view NAME`: waits (by signals, not by polling the event loop) until the
// model's statistics are complete — and for the inspector, until the analysis of the tensor with the
// heaviest tails is shown; for the engine views (freq, attention, kv-channels, perplexity) until their
// measurement with the view's default settings has completed; for gpu-bench until the GPU probe has
// answered — then grabs the window and quits. Exit code 0 on success, 2 on timeout or error.
class ScreenshotRunner : public QObject {
  Q_OBJECT
 public:
  // `quantizeMethod` (rtn, hqq, milo; empty: none) runs a quantization with the default settings first
  // and captures when it has completed, printing its duration.
  ScreenshotRunner(MainWindow* window, QString file, QString view, QString quantizeMethod = {},
                   int timeoutMs = 300000);

 private:
  void onStatsReady();
  // Starts the measurement an engine view shows, or captures at once for the other views.
  void populateView();
  void captureWhenDone(int job);
  void capture();
  void fail(const QString& why);
  MainWindow* window_;
  QString file_, view_, quantize_;
  qint64 runStartedMs_ = 0;
  QTimer timeout_;
  bool done_ = false;
};

}  // namespace moewb::gui

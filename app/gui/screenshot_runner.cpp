// SPDX-License-Identifier: MIT
#include "screenshot_runner.h"

#include <QApplication>
#include <QDateTime>
#include <QImage>
#include <QPixmap>
#include <cstdio>

#include "attention_page.h"
#include "engine_jobs.h"
#include "frequency_panel.h"
#include "gpu_bench_panel.h"
#include "inspector_panel.h"
#include "jobs_panel.h"
#include "kv_channels_page.h"
#include "kv_panel.h"
#include "main_window.h"
#include "models/attention_map_model.h"
#include "moewb/engine/kv_stats.h"
#include "moewb/methods/registry.h"
#include "perplexity_panel.h"
#include "try_it_panel.h"
#include "workbench_session.h"

namespace moewb::gui {

ScreenshotRunner::ScreenshotRunner(MainWindow* window, QString file, QString view, QString quantizeMethod,
                                   int timeoutMs)
    : QObject(window),
      window_(window),
      file_(std::move(file)),
      view_(std::move(view)),
      quantize_(std::move(quantizeMethod)) {
  window_->setInteractive(false);
  if (!MainWindow::viewNames().contains(view_)) {
    fail(QStringLiteral("unknown view '%1' (use one of: %2)")
             .arg(view_, MainWindow::viewNames().join(QLatin1String(", "))));
    return;
  }
  timeout_.setSingleShot(true);
  connect(&timeout_, &QTimer::timeout, this,
          [this] { fail(QStringLiteral("timed out waiting for the model")); });
  timeout_.start(timeoutMs);
  WorkbenchSession* session = window_->session();
  connect(session, &WorkbenchSession::statsFinished, this, &ScreenshotRunner::onStatsReady);
  connect(session, &WorkbenchSession::openFailed, this, [this](const QString& m) { fail(m); });
}

void ScreenshotRunner::onStatsReady() {
  if (done_) return;
  // The acceptance numbers (summary < 1 s, complete statistics < 5 s), measured from open().
  std::fprintf(stderr, "moewb-gui: summary after %.3f s, complete statistics after %.3f s%s\n",
               window_->session()->secondsToSummary(), window_->session()->secondsToStats(),
               window_->session()->stats()->from_cache ? " (from the cache)" : "");
  window_->showView(view_);
  if (!quantize_.isEmpty()) {
    QuantSettings settings = window_->jobsPanel()->settings();
    settings.method = quantize_.toLower();
    if (!methods::MethodRegistry::instance().find(settings.method.toStdString())) {
      fail(QStringLiteral("unknown method '%1' (%2)")
               .arg(quantize_, QString::fromStdString(methods::MethodRegistry::instance().namesText())));
      return;
    }
    window_->jobsPanel()->setSettings(settings);
    connect(window_->session(), &WorkbenchSession::quantizationFinished, this, [this](JobState state) {
      const double seconds = (QDateTime::currentMSecsSinceEpoch() - runStartedMs_) / 1000.0;
      std::fprintf(stderr, "moewb-gui: %s run %s in %.2f s (%zu tensors)\n", qPrintable(quantize_),
                   qPrintable(jobStateName(state)), seconds, window_->session()->results().size());
      if (state != JobState::Done) return fail(QStringLiteral("the quantization did not complete"));
      populateView();
    });
    runStartedMs_ = QDateTime::currentMSecsSinceEpoch();
    if (window_->startQuantization() == 0) fail(QStringLiteral("could not start the quantization"));
    return;
  }
  populateView();
}

void ScreenshotRunner::populateView() {
  if (view_ == QLatin1String("freq")) return captureWhenDone(window_->frequencyPanel()->run());
  if (view_ == QLatin1String("attention") || view_ == QLatin1String("kv-channels")) {
    // The last layer, every head: where attention sinks and channel outliers show best.
    connect(window_->session()->engine(), &EngineJobs::kvCaptureChanged, this, [this] {
      const int last = std::max(0, window_->kvPanel()->attentionPage()->model().layers() - 1);
      window_->kvPanel()->attentionPage()->select(last, AttentionMapModel::kAllHeads);
      window_->kvPanel()->channelsPage()->select(last, engine::kAllKvHeads);
    });
    return captureWhenDone(window_->kvPanel()->run());
  }
  if (view_ == QLatin1String("perplexity")) {
    PerplexityRequest request = window_->perplexityPanel()->request();
    request.lastRun = window_->session()->quantization() != nullptr;  // with --quantize: that run too
    window_->perplexityPanel()->setRequest(request);
    return captureWhenDone(window_->perplexityPanel()->run());
  }
  if (view_ == QLatin1String("try-it")) return captureWhenDone(window_->tryItPanel()->run());
  if (view_ == QLatin1String("gpu-bench")) {
    GpuBenchPanel* panel = window_->gpuBenchPanel();
    if (panel->availability()) {
      QTimer::singleShot(400, this, &ScreenshotRunner::capture);
    } else {
      connect(panel, &GpuBenchPanel::availabilityKnown, this,
              [this] { QTimer::singleShot(400, this, &ScreenshotRunner::capture); });
    }
    return;
  }
  if (view_ == QLatin1String("inspector")) {
    // Show the tensor with the heaviest tails: the most telling histogram and spectrum.
    const ModelStats* stats = window_->session()->stats();
    std::size_t best = 0;
    const std::size_t matrices = window_->session()->catalog()->matrices().size();
    for (std::size_t i = 1; i < std::min(matrices, stats->rows.size()); ++i)
      if (stats->rows[i].stats.kurtosis > stats->rows[best].stats.kurtosis) best = i;
    connect(window_->inspectorPanel(), &InspectorPanel::analysisShown, this,
            [this] { QTimer::singleShot(400, this, &ScreenshotRunner::capture); });
    window_->inspectorPanel()->showMatrix(best);
    return;
  }
  // Let the view lay out and paint (the GL canvas initialises on first show) before grabbing.
  QTimer::singleShot(400, this, &ScreenshotRunner::capture);
}

void ScreenshotRunner::captureWhenDone(int job) {
  if (job == 0) return fail(QStringLiteral("the %1 view's measurement could not start").arg(view_));
  const qint64 started = QDateTime::currentMSecsSinceEpoch();
  connect(window_->session()->jobs(), &JobRunner::jobFinished, this,
          [this, job, started](int id, JobState state, const QString& message) {
            if (id != job) return;
            std::fprintf(stderr, "moewb-gui: %s measurement %s in %.2f s\n", qPrintable(view_),
                         qPrintable(jobStateName(state)),
                         (QDateTime::currentMSecsSinceEpoch() - started) / 1000.0);
            if (state != JobState::Done)
              return fail(QStringLiteral("the measurement did not complete: %1").arg(message));
            QTimer::singleShot(400, this, &ScreenshotRunner::capture);
          });
}

void ScreenshotRunner::capture() {
  if (done_) return;
  done_ = true;
  const QImage image = window_->grab().toImage();
  if (image.isNull() || !image.save(file_)) {
    std::fprintf(stderr, "moewb-gui: cannot write screenshot %s\n", qPrintable(file_));
    QCoreApplication::exit(2);
    return;
  }
  std::fprintf(stderr, "moewb-gui: wrote %s (%dx%d, view %s)\n", qPrintable(file_), image.width(),
               image.height(), qPrintable(view_));
  QCoreApplication::exit(0);
}

void ScreenshotRunner::fail(const QString& why) {
  if (done_) return;
  done_ = true;
  std::fprintf(stderr, "moewb-gui: screenshot failed: %s\n", qPrintable(why));
  // Deferred: the constructor may run before the event loop starts.
  QTimer::singleShot(0, qApp, [] { QCoreApplication::exit(2); });
}

}  // namespace moewb::gui

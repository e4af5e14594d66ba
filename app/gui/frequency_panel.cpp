// SPDX-License-Identifier: MIT
#include "frequency_panel.h"

#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include "engine_jobs.h"
#include "heatmap/heatmap_export.h"
#include "heatmap/heatmap_view.h"
#include "jobs/job_status_line.h"
#include "moewb/atomic_file.h"
#include "workbench_session.h"

namespace moewb::gui {

FrequencyPanel::FrequencyPanel(WorkbenchSession* session, QWidget* parent)
    : QWidget(parent),
      session_(session),
      text_(new QLineEdit(EngineJobs::demoTextPath(), this)),
      seqLen_(new QSpinBox(this)),
      maxWindows_(new QSpinBox(this)),
      run_(new QPushButton(tr("Measure"), this)),
      cancel_(new QPushButton(tr("Cancel"), this)),
      exportCsv_(new QPushButton(tr("Export CSV…"), this)),
      exportJson_(new QPushButton(tr("Export JSON…"), this)),
      exportImage_(new QPushButton(tr("Export image…"), this)),
      summary_(new QLabel(this)),
      status_(new JobStatusLine(session->jobs(), this)),
      view_(new HeatmapView(this)) {
  text_->setPlaceholderText(tr("text file routed through the model"));
  seqLen_->setRange(2, 1 << 16);
  seqLen_->setValue(256);
  seqLen_->setToolTip(tr("Window length in tokens (moewb freq --seq-len)"));
  maxWindows_->setRange(0, 1 << 20);
  maxWindows_->setValue(16);
  maxWindows_->setSpecialValueText(tr("all"));
  maxWindows_->setToolTip(tr("Only the first N windows of the text (moewb freq --max-windows; 0 = all)"));
  run_->setObjectName(QStringLiteral("runFrequency"));
  cancel_->setObjectName(QStringLiteral("cancelFrequency"));
  view_->setRankEditing(false);
  view_->setExportName(QStringLiteral("expert-frequency"));
  summary_->setWordWrap(true);
  auto* browse = new QPushButton(tr("Browse…"), this);
  auto* load = new QPushButton(tr("Load JSON/CSV…"), this);
  load->setToolTip(tr("Output of moewb freq --json or --csv"));

  auto* row1 = new QHBoxLayout;
  row1->addWidget(new QLabel(tr("Text:"), this));
  row1->addWidget(text_, 1);
  row1->addWidget(browse);
  row1->addWidget(new QLabel(tr("Window:"), this));
  row1->addWidget(seqLen_);
  row1->addWidget(new QLabel(tr("Max windows:"), this));
  row1->addWidget(maxWindows_);
  row1->addWidget(run_);
  row1->addWidget(cancel_);
  auto* row2 = new QHBoxLayout;
  row2->addWidget(load);
  row2->addWidget(exportCsv_);
  row2->addWidget(exportJson_);
  row2->addWidget(exportImage_);
  row2->addWidget(summary_, 1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(row1);
  layout->addLayout(row2);
  layout->addWidget(status_);
  layout->addWidget(view_, 1);

  connect(browse, &QPushButton::clicked, this, [this] {
    const QString path =
        QFileDialog::getOpenFileName(this, tr("Text to route through the model"), text_->text(),
                                     tr("Text (*.txt *.md *.rst);;All files (*)"));
    if (!path.isEmpty()) text_->setText(path);
  });
  connect(run_, &QPushButton::clicked, this, &FrequencyPanel::run);
  connect(cancel_, &QPushButton::clicked, this,
          [this] { session_->engine()->cancel(EngineJobs::Kind::Frequency); });
  connect(load, &QPushButton::clicked, this, &FrequencyPanel::loadDialog);
  connect(exportCsv_, &QPushButton::clicked, this, [this] { exportDialog(QStringLiteral("csv")); });
  connect(exportJson_, &QPushButton::clicked, this, [this] { exportDialog(QStringLiteral("json")); });
  connect(exportImage_, &QPushButton::clicked, view_, &HeatmapView::exportDialog);
  connect(session_, &WorkbenchSession::frequenciesChanged, this, &FrequencyPanel::refresh);
  connect(session_, &WorkbenchSession::modelOpened, this, &FrequencyPanel::refresh);
  connect(session_->engine(), &EngineJobs::jobStarted, this, &FrequencyPanel::updateButtons);
  connect(session_->engine(), &EngineJobs::jobFinished, this, &FrequencyPanel::updateButtons);
  refresh();
}

void FrequencyPanel::setTextFile(const QString& path) {
  text_->setText(path);
}
QString FrequencyPanel::textFile() const {
  return text_->text().trimmed();
}
void FrequencyPanel::setWindows(int seqLen, int maxWindows) {
  seqLen_->setValue(seqLen);
  maxWindows_->setValue(maxWindows);
}

int FrequencyPanel::run() {
  FrequencyRequest request;
  request.textFile = textFile();
  request.seqLen = seqLen_->value();
  request.maxWindows = maxWindows_->value();
  QString error;
  const int id = session_->engine()->measureFrequencies(request, &error);
  if (!id) {
    status_->showError(error);
    return 0;
  }
  status_->track(id);
  updateButtons();
  return id;
}

void FrequencyPanel::updateButtons() {
  const bool running = session_->engine()->runningJob(EngineJobs::Kind::Frequency) != 0;
  run_->setEnabled(!running && session_->catalog());
  cancel_->setEnabled(running);
  const bool have = session_->frequencyRecord() != nullptr;
  exportCsv_->setEnabled(have);
  exportJson_->setEnabled(have);
  exportImage_->setEnabled(have);
}

void FrequencyPanel::refresh() {
  const ExpertFrequencyRecord* r = session_->frequencyRecord();
  if (!r) {
    view_->setData({});
    summary_->setText(session_->catalog() ? tr("No frequencies yet: measure them on a text or load a file.")
                                          : tr("Open a model first."));
  } else {
    view_->setData(frequencyHeatmap(*r));
    const auto& f = r->frequency;
    const QString source = QFileInfo(r->source).fileName();
    summary_->setText(r->knowsTokens()
                          ? tr("%1 tokens of %2, top-%3 of %4 experts; colour = fraction of tokens routed. "
                               "Used by frequency-R rank policies.")
                                .arg(f.tokens)
                                .arg(source)
                                .arg(f.top_k)
                                .arg(f.num_experts)
                          : tr("Counts from %1 (no token count in the file); colour = share of the layer's "
                               "routing decisions. Used by frequency-R rank policies.")
                                .arg(source));
  }
  updateButtons();
}

bool FrequencyPanel::loadFile(const QString& path, QString* error) {
  try {
    session_->setExpertFrequencies(loadExpertFrequencyRecord(path));
  } catch (const std::exception& e) {
    const QString message = QString::fromUtf8(e.what());
    status_->showError(message);
    if (error) *error = message;
    return false;
  }
  status_->showMessage(tr("Loaded %1").arg(path));
  return true;
}

void FrequencyPanel::loadDialog() {
  const QString path =
      QFileDialog::getOpenFileName(this, tr("Expert frequencies (moewb freq --json or --csv)"), QString(),
                                   tr("Frequencies (*.json *.csv);;All files (*)"));
  if (!path.isEmpty()) loadFile(path);
}

namespace {
bool writeText(const QString& path, const std::string& text, QString* error) {
  try {
    writeFileAtomically(path.toStdString(), text);
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  return true;
}
}  // namespace

bool FrequencyPanel::exportCsv(const QString& path, QString* error) const {
  const ExpertFrequencyRecord* r = session_->frequencyRecord();
  if (!r) {
    if (error) *error = tr("No expert frequencies to export.");
    return false;
  }
  return writeText(path, r->toCsv(), error);
}

bool FrequencyPanel::exportJson(const QString& path, QString* error) const {
  const ExpertFrequencyRecord* r = session_->frequencyRecord();
  if (!r) {
    if (error) *error = tr("No expert frequencies to export.");
    return false;
  }
  return writeText(path, r->toJson(), error);
}

bool FrequencyPanel::exportImage(const QString& path, QString* error) const {
  const ExpertFrequencyRecord* r = session_->frequencyRecord();
  if (!r) {
    if (error) *error = tr("No expert frequencies to export.");
    return false;
  }
  return exportHeatmapImage(frequencyHeatmap(*r), path, QSize(1000, 420), error);
}

void FrequencyPanel::exportDialog(const QString& kind) {
  const bool csv = kind == QLatin1String("csv");
  const QString path = QFileDialog::getSaveFileName(this, tr("Export expert frequencies"),
                                                    QStringLiteral("expert-frequency.") + kind,
                                                    csv ? tr("CSV (*.csv)") : tr("JSON (*.json)"));
  if (path.isEmpty()) return;
  QString error;
  if (!(csv ? exportCsv(path, &error) : exportJson(path, &error)))
    status_->showError(error);
  else
    status_->showMessage(tr("Wrote %1").arg(path));
}

}  // namespace moewb::gui

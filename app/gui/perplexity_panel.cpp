// SPDX-License-Identifier: MIT
#include "perplexity_panel.h"

#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include "jobs/job_status_line.h"
#include "models/perplexity_table_model.h"
#include "moewb/atomic_file.h"
#include "moewb/methods/spec.h"
#include "workbench_session.h"

namespace moewb::gui {

PerplexityPanel::PerplexityPanel(WorkbenchSession* session, QWidget* parent)
    : QWidget(parent),
      session_(session),
      text_(new QLineEdit(EngineJobs::demoTextPath(), this)),
      seqLen_(new QSpinBox(this)),
      maxWindows_(new QSpinBox(this)),
      original_(new QCheckBox(tr("original weights"), this)),
      lastRun_(new QCheckBox(tr("last quantization run (in memory)"), this)),
      folders_(new QListWidget(this)),
      specs_(new QLineEdit(QStringLiteral("rtn:3, hqq:3"), this)),
      run_(new QPushButton(tr("Evaluate"), this)),
      cancel_(new QPushButton(tr("Cancel"), this)),
      settings_(new QLabel(this)),
      status_(new JobStatusLine(session->jobs(), this)),
      model_(new PerplexityTableModel(this)),
      view_(new QTableView(this)) {
  seqLen_->setRange(2, 1 << 16);
  seqLen_->setValue(256);
  seqLen_->setToolTip(tr("Window length in tokens (moewb eval --seq-len)"));
  maxWindows_->setRange(0, 1 << 20);
  // 40 windows (~10k tokens): on 4 windows a 3-bit model could look better than bf16 by chance; the Δ
  // column says when a difference is within the noise of the windows evaluated.
  maxWindows_->setValue(40);
  maxWindows_->setSpecialValueText(tr("all"));
  maxWindows_->setToolTip(tr("Evaluate only the first N windows (moewb eval --max-windows; 0 = all). Few "
                             "windows give large error bars: the Δ column says when a difference is within "
                             "the noise."));
  original_->setChecked(true);
  lastRun_->setToolTip(tr("The quantization the Jobs view completed last, dequantized in memory"));
  folders_->setMaximumHeight(70);
  folders_->setToolTip(tr("Compressed or dequantized export folders (moewb eval --quantized DIR)"));
  // The syntax of every registered method, from the one spec parser's description.
  specs_->setToolTip(tr("Quantize in memory and evaluate, comma-separated (moewb eval --quantize): %1; options as "
                        "KEY=VALUE, e.g. hqq:4:group=128, milo:3:dense-64+frequency-16")
                         .arg(QString::fromStdString(methods::methodSpecSyntax())));
  run_->setObjectName(QStringLiteral("runPerplexity"));
  cancel_->setObjectName(QStringLiteral("cancelPerplexity"));
  view_->setModel(model_);
  view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  view_->horizontalHeader()->setStretchLastSection(false);
  view_->verticalHeader()->hide();
  settings_->setWordWrap(true);

  auto* browse = new QPushButton(tr("Browse…"), this);
  auto* textRow = new QHBoxLayout;
  textRow->addWidget(text_, 1);
  textRow->addWidget(browse);
  auto* windows = new QHBoxLayout;
  windows->addWidget(seqLen_);
  windows->addWidget(new QLabel(tr("max windows"), this));
  windows->addWidget(maxWindows_);
  windows->addStretch();
  auto* form = new QFormLayout;
  form->addRow(tr("Text:"), textRow);
  form->addRow(tr("Window length:"), windows);

  auto* addFolder = new QPushButton(tr("Add export folder…"), this);
  auto* removeFolder = new QPushButton(tr("Remove"), this);
  auto* folderButtons = new QVBoxLayout;
  folderButtons->addWidget(addFolder);
  folderButtons->addWidget(removeFolder);
  folderButtons->addStretch();
  auto* folderRow = new QHBoxLayout;
  folderRow->addWidget(folders_, 1);
  folderRow->addLayout(folderButtons);
  auto* variants = new QGroupBox(tr("Variants"), this);
  auto* variantForm = new QFormLayout(variants);
  auto* checks = new QHBoxLayout;
  checks->addWidget(original_);
  checks->addWidget(lastRun_);
  checks->addStretch();
  variantForm->addRow(checks);
  variantForm->addRow(tr("Quick specs:"), specs_);
  variantForm->addRow(tr("Export folders:"), folderRow);

  auto* buttons = new QHBoxLayout;
  buttons->addWidget(run_);
  buttons->addWidget(cancel_);
  buttons->addStretch();
  auto* copyCsv = new QPushButton(tr("Copy CSV"), this);
  auto* copyMd = new QPushButton(tr("Copy Markdown"), this);
  auto* exportButton = new QPushButton(tr("Export…"), this);
  buttons->addWidget(copyCsv);
  buttons->addWidget(copyMd);
  buttons->addWidget(exportButton);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(form);
  layout->addWidget(variants);
  layout->addLayout(buttons);
  layout->addWidget(status_);
  layout->addWidget(settings_);
  layout->addWidget(view_, 1);

  connect(browse, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Text to evaluate on"), text_->text(),
                                                      tr("Text (*.txt *.md *.rst);;All files (*)"));
    if (!path.isEmpty()) text_->setText(path);
  });
  connect(addFolder, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Compressed or dequantized export folder"));
    if (!dir.isEmpty()) folders_->addItem(dir);
  });
  connect(removeFolder, &QPushButton::clicked, this, [this] { qDeleteAll(folders_->selectedItems()); });
  connect(run_, &QPushButton::clicked, this, &PerplexityPanel::run);
  connect(cancel_, &QPushButton::clicked, this,
          [this] { session_->engine()->cancel(EngineJobs::Kind::Perplexity); });
  connect(copyCsv, &QPushButton::clicked, this,
          [this] { QApplication::clipboard()->setText(model_->toCsv()); });
  connect(copyMd, &QPushButton::clicked, this,
          [this] { QApplication::clipboard()->setText(model_->toMarkdown()); });
  connect(exportButton, &QPushButton::clicked, this, [this] {
    const QString path =
        QFileDialog::getSaveFileName(this, tr("Export perplexity table"), QStringLiteral("perplexity.csv"),
                                     tr("CSV (*.csv);;Markdown (*.md)"));
    if (path.isEmpty()) return;
    QString error;
    if (!exportTable(path, &error))
      status_->showError(error);
    else
      status_->showMessage(tr("Wrote %1").arg(path));
  });
  EngineJobs* engine = session_->engine();
  connect(engine, &EngineJobs::perplexityRowArrived, this, &PerplexityPanel::showRows);
  connect(engine, &EngineJobs::perplexityRowsChanged, this, &PerplexityPanel::showRows);
  connect(engine, &EngineJobs::jobStarted, this, &PerplexityPanel::updateButtons);
  connect(engine, &EngineJobs::jobFinished, this, &PerplexityPanel::updateButtons);
  connect(session_, &WorkbenchSession::resultsChanged, this, &PerplexityPanel::updateButtons);
  connect(session_, &WorkbenchSession::modelOpened, this, &PerplexityPanel::updateButtons);
  showRows();
}

PerplexityRequest PerplexityPanel::request() const {
  PerplexityRequest r;
  r.textFile = text_->text().trimmed();
  r.seqLen = seqLen_->value();
  r.maxWindows = maxWindows_->value();
  r.original = original_->isChecked();
  r.lastRun = lastRun_->isChecked() && lastRun_->isEnabled();
  for (int i = 0; i < folders_->count(); ++i) r.exportFolders << folders_->item(i)->text();
  for (const QString& spec : specs_->text().split(QLatin1Char(','), Qt::SkipEmptyParts))
    if (!spec.trimmed().isEmpty()) r.quickSpecs << spec.trimmed();
  return r;
}

void PerplexityPanel::setRequest(const PerplexityRequest& r) {
  text_->setText(r.textFile);
  seqLen_->setValue(r.seqLen);
  maxWindows_->setValue(r.maxWindows);
  original_->setChecked(r.original);
  lastRun_->setChecked(r.lastRun);
  folders_->clear();
  folders_->addItems(r.exportFolders);
  specs_->setText(r.quickSpecs.join(QStringLiteral(", ")));
}

int PerplexityPanel::run() {
  QString error;
  const int id = session_->engine()->evaluatePerplexity(request(), &error);
  if (!id) status_->showError(error);
  status_->track(id);
  updateButtons();
  return id;
}

void PerplexityPanel::showRows() {
  EngineJobs* engine = session_->engine();
  const bool running = engine->runningJob(EngineJobs::Kind::Perplexity) != 0;
  // While a run goes its rows appear as they finish; otherwise the last complete run's.
  model_->setRows(running ? engine->pendingPerplexityRows() : engine->perplexityRows());
  const PerplexityRequest& r = engine->perplexitySettings();
  if (!running && !engine->perplexityRows().empty())
    settings_->setText(
        tr("On %1, windows of %2 tokens, %3; memory = the model's weights as stored with the "
           "variant's matrices.")
            .arg(QFileInfo(r.textFile).fileName())
            .arg(r.seqLen)
            .arg(r.maxWindows ? tr("first %n window(s)", nullptr, r.maxWindows) : tr("all windows")));
  else if (!running)
    settings_->clear();
}

void PerplexityPanel::updateButtons() {
  const bool running = session_->engine()->runningJob(EngineJobs::Kind::Perplexity) != 0;
  run_->setEnabled(!running && session_->catalog());
  cancel_->setEnabled(running);
  lastRun_->setEnabled(session_->quantization() != nullptr);
  showRows();
}

bool PerplexityPanel::exportTable(const QString& path, QString* error) const {
  const QString suffix = QFileInfo(path).suffix().toLower();
  if (suffix != QLatin1String("csv") && suffix != QLatin1String("md")) {
    if (error) *error = tr("%1: use .csv or .md").arg(path);
    return false;
  }
  try {
    writeFileAtomically(
        path.toStdString(),
        (suffix == QLatin1String("csv") ? model_->toCsv() : model_->toMarkdown()).toStdString());
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  return true;
}

}  // namespace moewb::gui

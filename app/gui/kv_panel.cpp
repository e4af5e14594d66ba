// SPDX-License-Identifier: MIT
#include "kv_panel.h"

#include <QFileDialog>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTabWidget>
#include <QVBoxLayout>

#include "attention_page.h"
#include "engine_jobs.h"
#include "jobs/job_status_line.h"
#include "kv_channels_page.h"
#include "workbench_session.h"

namespace moewb::gui {

QString KvPanel::defaultPrompt() {
  // From the bundled demo text, so the demo model sees the kind of text it was measured on.
  return QStringLiteral(
      "DTrace and SystemTap are monitoring tools, each providing a way to inspect what the processes on a "
      "computer system are doing. They both use domain-specific languages allowing a user to write scripts "
      "which filter which processes are to be observed.");
}

KvPanel::KvPanel(WorkbenchSession* session, QWidget* parent)
    : QWidget(parent),
      session_(session),
      prompt_(new QPlainTextEdit(defaultPrompt(), this)),
      maxTokens_(new QSpinBox(this)),
      firstTokens_(new QSpinBox(this)),
      run_(new QPushButton(tr("Capture"), this)),
      cancel_(new QPushButton(tr("Cancel"), this)),
      save_(new QPushButton(tr("Save capture…"), this)),
      source_(new QLabel(this)),
      status_(new JobStatusLine(session->jobs(), this)),
      pages_(new QTabWidget(this)),
      attention_(new AttentionPage(this)),
      channels_(new KvChannelsPage(this)) {
  prompt_->setMaximumHeight(64);
  prompt_->setPlaceholderText(tr("prompt whose K/V cache and attention to capture"));
  maxTokens_->setRange(1, 4096);
  maxTokens_->setValue(128);
  maxTokens_->setToolTip(
      tr("Truncate the prompt to N tokens (moewb kv --max-tokens); the attention map "
         "grows with N²"));
  firstTokens_->setRange(1, 64);
  firstTokens_->setValue(4);
  firstTokens_->setToolTip(tr("Keys counted as the first tokens (attention sinks; moewb kv --first-tokens)"));
  run_->setObjectName(QStringLiteral("runKvCapture"));
  cancel_->setObjectName(QStringLiteral("cancelKvCapture"));
  auto* open = new QPushButton(tr("Open capture…"), this);
  open->setToolTip(tr("A file written by moewb kv --out FILE"));
  pages_->addTab(attention_, tr("Attention"));
  pages_->addTab(channels_, tr("K/V channels"));

  auto* controls = new QGridLayout;
  controls->addWidget(new QLabel(tr("Prompt:"), this), 0, 0, Qt::AlignTop);
  controls->addWidget(prompt_, 0, 1, 2, 1);
  auto* limits = new QHBoxLayout;
  limits->addWidget(new QLabel(tr("Max tokens:"), this));
  limits->addWidget(maxTokens_);
  limits->addWidget(new QLabel(tr("First tokens:"), this));
  limits->addWidget(firstTokens_);
  limits->addWidget(run_);
  limits->addWidget(cancel_);
  auto* files = new QHBoxLayout;
  files->addWidget(open);
  files->addWidget(save_);
  files->addStretch();
  controls->addLayout(limits, 0, 2);
  controls->addLayout(files, 1, 2);
  controls->setColumnStretch(1, 1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(controls);
  layout->addWidget(source_);
  layout->addWidget(status_);
  layout->addWidget(pages_, 1);

  connect(run_, &QPushButton::clicked, this, &KvPanel::run);
  connect(cancel_, &QPushButton::clicked, this,
          [this] { session_->engine()->cancel(EngineJobs::Kind::KvCapture); });
  connect(open, &QPushButton::clicked, this, [this] {
    const QString path =
        QFileDialog::getOpenFileName(this, tr("Open K/V capture (moewb kv --out FILE)"), QString(),
                                     tr("K/V captures (*.safetensors);;All files (*)"));
    if (!path.isEmpty()) openFile(path);
  });
  connect(save_, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getSaveFileName(
        this, tr("Save K/V capture"), QStringLiteral("kv.safetensors"), tr("K/V captures (*.safetensors)"));
    if (!path.isEmpty()) saveFile(path);
  });
  connect(session_->engine(), &EngineJobs::kvCaptureChanged, this, &KvPanel::onCaptureChanged);
  connect(session_->engine(), &EngineJobs::jobStarted, this, &KvPanel::updateButtons);
  connect(session_->engine(), &EngineJobs::jobFinished, this, &KvPanel::updateButtons);
  connect(session_, &WorkbenchSession::modelOpened, this, &KvPanel::updateButtons);
  onCaptureChanged();
}

void KvPanel::setPrompt(const QString& prompt) {
  prompt_->setPlainText(prompt);
}

void KvPanel::setLimits(int maxTokens, int firstTokens) {
  maxTokens_->setValue(maxTokens);
  firstTokens_->setValue(firstTokens);
}

int KvPanel::run() {
  KvCaptureRequest request;
  request.prompt = prompt_->toPlainText();
  request.maxTokens = maxTokens_->value();
  request.firstTokens = firstTokens_->value();
  QString error;
  const int id = session_->engine()->captureKv(request, &error);
  if (!id) status_->showError(error);
  status_->track(id);
  updateButtons();
  return id;
}

int KvPanel::openFile(const QString& path) {
  QString error;
  const int id = session_->engine()->openKvCapture(path, &error);
  if (!id) status_->showError(error);
  status_->track(id);
  updateButtons();
  return id;
}

int KvPanel::saveFile(const QString& path) {
  QString error;
  const int id = session_->engine()->saveKvCapture(path, &error);
  if (!id) status_->showError(error);
  status_->track(id);
  return id;
}

void KvPanel::showPage(Page page) {
  pages_->setCurrentIndex(page == Page::Attention ? 0 : 1);
}

KvPanel::Page KvPanel::currentPage() const {
  return pages_->currentIndex() == 1 ? Page::Channels : Page::Attention;
}

void KvPanel::onCaptureChanged() {
  const auto capture = session_->engine()->kvCapture();
  attention_->setCapture(capture);
  channels_->setCapture(capture);
  if (!capture)
    source_->setText(session_->catalog() ? tr("No capture yet: capture a prompt or open a moewb kv file.")
                                         : tr("Open a model first (or open a moewb kv file)."));
  else
    source_->setText(tr("%1 tokens, %2 layers × %3 heads (%4 KV heads, key dim %5, value dim %6) — %7")
                         .arg(capture->length)
                         .arg(capture->layers)
                         .arg(capture->heads)
                         .arg(capture->kv_heads)
                         .arg(capture->key_dim)
                         .arg(capture->value_dim)
                         .arg(session_->engine()->kvSource()));
  updateButtons();
}

void KvPanel::updateButtons() {
  const bool running = session_->engine()->runningJob(EngineJobs::Kind::KvCapture) != 0;
  run_->setEnabled(!running && session_->catalog());
  cancel_->setEnabled(running);
  save_->setEnabled(session_->engine()->kvCapture() != nullptr);
}

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#include "try_it_panel.h"

#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include "jobs/job_status_line.h"
#include "workbench_session.h"

namespace moewb::gui {

namespace {
QString megabytes(double bytes) {
  return QString::number(bytes / 1e6, 'f', 2) + QStringLiteral(" MB");
}
}  // namespace

TryItPanel::TryItPanel(WorkbenchSession* session, QWidget* parent)
    : QWidget(parent),
      session_(session),
      prompt_(new QLineEdit(tr("The history of the city"), this)),
      maxNewTokens_(new QSpinBox(this)),
      generate_(new QPushButton(tr("Generate"), this)),
      stop_(new QPushButton(tr("Stop"), this)),
      output_(new QPlainTextEdit(this)),
      speeds_(new QLabel(this)),
      status_(new JobStatusLine(session->jobs(), this)) {
  prompt_->setObjectName(QStringLiteral("tryItPrompt"));
  prompt_->setToolTip(tr("Text the model continues (moewb generate --prompt; tokenized as [bos] + text)"));
  maxNewTokens_->setRange(1, 4096);
  maxNewTokens_->setValue(32);
  maxNewTokens_->setToolTip(tr("Tokens to generate at most (moewb generate --max-new-tokens)"));
  generate_->setObjectName(QStringLiteral("runGeneration"));
  stop_->setObjectName(QStringLiteral("stopGeneration"));
  output_->setReadOnly(true);
  output_->setPlaceholderText(
      tr("The continuation appears here, token by token (greedy, original weights)."));
  speeds_->setWordWrap(true);

  auto* form = new QFormLayout;
  form->addRow(tr("Prompt:"), prompt_);
  auto* row = new QHBoxLayout;
  row->addWidget(maxNewTokens_);
  row->addWidget(generate_);
  row->addWidget(stop_);
  row->addStretch();
  form->addRow(tr("New tokens:"), row);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(form);
  layout->addWidget(status_);
  layout->addWidget(output_, 1);
  layout->addWidget(speeds_);

  connect(generate_, &QPushButton::clicked, this, &TryItPanel::run);
  connect(prompt_, &QLineEdit::returnPressed, this, [this] {
    if (generate_->isEnabled()) run();
  });
  connect(stop_, &QPushButton::clicked, this,
          [this] { session_->engine()->cancel(EngineJobs::Kind::Generation); });
  EngineJobs* engine = session_->engine();
  connect(engine, &EngineJobs::generatedTextChanged, this, &TryItPanel::showText);
  connect(engine, &EngineJobs::generationChanged, this, &TryItPanel::showSpeeds);
  connect(engine, &EngineJobs::jobStarted, this, &TryItPanel::updateButtons);
  connect(engine, &EngineJobs::jobFinished, this, &TryItPanel::updateButtons);
  connect(session_, &WorkbenchSession::modelOpened, this, &TryItPanel::updateButtons);
  updateButtons();
}

GenerationRequest TryItPanel::request() const {
  GenerationRequest r;
  r.prompt = prompt_->text();
  r.maxNewTokens = maxNewTokens_->value();
  return r;
}

void TryItPanel::setRequest(const GenerationRequest& r) {
  prompt_->setText(r.prompt);
  maxNewTokens_->setValue(r.maxNewTokens);
}

int TryItPanel::run() {
  QString error;
  const int id = session_->engine()->generate(request(), &error);
  if (!id) status_->showError(error);
  status_->track(id);
  speeds_->clear();
  updateButtons();
  return id;
}

void TryItPanel::showText() {
  // The continuation only: SentencePiece drops the leading space of a decoded piece, so gluing it to the
  // prompt could join two words; the prompt stays in its field above.
  const QString text = session_->engine()->generatedText();
  if (output_->toPlainText() != text) output_->setPlainText(text);
}

void TryItPanel::showSpeeds() {
  const auto& g = session_->engine()->generation();
  if (!g) {
    speeds_->clear();
    return;
  }
  const engine::GenerationTimings& t = g->generation.timings;
  speeds_->setText(tr("%1 prompt tokens, %2 new (stopped by %3). Prefill %4 tokens/s, decode %5 tokens/s; "
                      "KV cache %6, process peak %7.")
                       .arg(g->generation.prompt_ids.size())
                       .arg(g->generation.new_ids.size())
                       .arg(QString::fromLatin1(engine::stopReasonName(g->generation.stopped_by)))
                       .arg(t.prefillTokensPerSecond(), 0, 'f', 0)
                       .arg(t.decodeTokensPerSecond(), 0, 'f', 1)
                       .arg(megabytes(double(t.peak_kv_cache_bytes)))
                       .arg(megabytes(double(g->peak_rss_bytes))));
}

void TryItPanel::updateButtons() {
  const bool running = session_->engine()->runningJob(EngineJobs::Kind::Generation) != 0;
  generate_->setEnabled(!running && session_->catalog());
  stop_->setEnabled(running);
}

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#include "jobs_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QVBoxLayout>

#include "charts/convergence_plot.h"
#include "jobs/job_view.h"
#include "method_options_form.h"
#include "moewb/methods/registry.h"
#include "workbench_session.h"

namespace moewb::gui {

JobsPanel::JobsPanel(WorkbenchSession* session, QWidget* parent)
    : QWidget(parent),
      session_(session),
      method_(new QComboBox(this)),
      options_(new MethodOptionsForm(this)),
      device_(new QComboBox(this)),
      onlyFiltered_(new QCheckBox(tr("only the tensors the table filter shows"), this)),
      run_(new QPushButton(tr("Run"), this)),
      cancel_(new QPushButton(tr("Cancel"), this)),
      summary_(new QLabel(this)),
      convergence_(new ConvergencePlot(this)),
      jobView_(new JobView(session->jobs(), this)) {
  // Every registered method, with the form of its options made from the registry.
  for (const methods::WeightMethod* m : methods::MethodRegistry::instance().all())
    method_->addItem(QString::fromStdString(std::string(m->title())), QString::fromStdString(std::string(m->name())));
  method_->setObjectName(QStringLiteral("quantizationMethod"));
  // The words QuantSettings::device stores (and `moewb quantize --device` takes).
  device_->addItem(tr("auto (the GPU when one is present)"), QStringLiteral("auto"));
  device_->addItem(tr("CPU"), QStringLiteral("cpu"));
  device_->addItem(tr("CUDA GPU (batched over experts)"), QStringLiteral("cuda"));
  device_->setObjectName(QStringLiteral("quantizationDevice"));
  setSettings(QuantSettings{});
  run_->setObjectName(QStringLiteral("runQuantization"));
  cancel_->setObjectName(QStringLiteral("cancelQuantization"));

  auto* form = new QFormLayout;
  form->addRow(tr("Method"), method_);
  form->addRow(options_);
  form->addRow(tr("Device"), device_);
  form->addRow(QString(), onlyFiltered_);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(run_);
  buttons->addWidget(cancel_);
  buttons->addStretch();
  auto* left = new QWidget(this);
  auto* leftLayout = new QVBoxLayout(left);
  leftLayout->addLayout(form);
  leftLayout->addLayout(buttons);
  leftLayout->addWidget(summary_);
  leftLayout->addWidget(jobView_, 1);
  auto* split = new QSplitter(this);
  split->addWidget(left);
  split->addWidget(convergence_);
  split->setStretchFactor(1, 1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(split);

  connect(run_, &QPushButton::clicked, this, &JobsPanel::runRequested);
  connect(cancel_, &QPushButton::clicked, this, [this] {
    if (session_->quantizationJob()) session_->jobs()->cancel(session_->quantizationJob());
  });
  connect(method_, &QComboBox::currentIndexChanged, this, [this] {
    options_->setMethod(method_->currentData().toString());
    updateState();
    emit settingsChanged();
  });
  // Bits, group and compensator storage change the totals the policy editor shows.
  connect(options_, &MethodOptionsForm::valuesChanged, this, &JobsPanel::settingsChanged);
  connect(session_->jobs(), &JobRunner::jobChanged, this, &JobsPanel::updateState);
  connect(session_, &WorkbenchSession::quantizationStarted, this, &JobsPanel::updateState);
  connect(session_, &WorkbenchSession::quantizationFinished, this, &JobsPanel::updateState);
  connect(session_, &WorkbenchSession::modelOpened, this, &JobsPanel::updateState);
  connect(session_, &WorkbenchSession::resultArrived, this, &JobsPanel::updateState);
  connect(session_, &WorkbenchSession::convergencePoint, this,
          [this](const QString& tensor, int iteration, double error) {
            convergence_->addPoint(tensor, iteration, error);
          });
  updateState();
}

QuantSettings JobsPanel::settings() const {
  QuantSettings s;
  s.method = method_->currentData().toString();
  s.options = options_->values();
  s.device = device_->currentData().toString();
  return s;
}

void JobsPanel::setSettings(const QuantSettings& s) {
  const int method = method_->findData(s.method);
  method_->setCurrentIndex(method >= 0 ? method : 0);
  options_->setMethod(method_->currentData().toString());
  options_->setValues(s.options);
  const int device = device_->findData(s.device.toLower());
  device_->setCurrentIndex(device >= 0 ? device : 0);
}

bool JobsPanel::onlyFiltered() const {
  return onlyFiltered_->isChecked();
}

void JobsPanel::updateState() {
  const bool running = session_->quantizationRunning();
  run_->setEnabled(!running && session_->catalog() != nullptr);
  cancel_->setEnabled(running);
  if (running) {
    const JobInfo* j = session_->jobs()->job(session_->quantizationJob());
    summary_->setText(tr("Running: %1 tensors done — %2")
                          .arg(session_->pendingResults().size())
                          .arg(j ? j->stage : QString()));
  } else if (!session_->results().empty()) {
    double sum = 0;
    for (const auto& [m, r] : session_->results()) sum += r.relError;
    summary_->setText(tr("Last run: %1 tensors, mean relative error %2")
                          .arg(session_->results().size())
                          .arg(sum / double(session_->results().size()), 0, 'f', 5));
  } else {
    summary_->setText(tr("No results yet."));
  }
}

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#include "jobs_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QVBoxLayout>

#include "charts/convergence_plot.h"
#include "jobs/job_view.h"
#include "workbench_session.h"

namespace moewb::gui {

JobsPanel::JobsPanel(WorkbenchSession* session, QWidget* parent)
    : QWidget(parent),
      session_(session),
      method_(new QComboBox(this)),
      bits_(new QSpinBox(this)),
      group_(new QSpinBox(this)),
      iterations_(new QSpinBox(this)),
      compensator_(new QComboBox(this)),
      device_(new QComboBox(this)),
      onlyFiltered_(new QCheckBox(tr("only the tensors the table filter shows"), this)),
      run_(new QPushButton(tr("Run"), this)),
      cancel_(new QPushButton(tr("Cancel"), this)),
      summary_(new QLabel(this)),
      convergence_(new ConvergencePlot(this)),
      jobView_(new JobView(session->jobs(), this)) {
  method_->addItem(QStringLiteral("RTN"), int(QuantMethod::Rtn));
  method_->addItem(QStringLiteral("HQQ"), int(QuantMethod::Hqq));
  method_->addItem(tr("MiLo (HQQ + low-rank compensators, ranks from the policy)"), int(QuantMethod::Milo));
  bits_->setRange(2, 8);
  group_->setRange(8, 4096);
  group_->setSingleStep(32);
  iterations_->setRange(1, 100);
  for (const char* f : {"int3", "int8", "fp16", "fp32"}) compensator_->addItem(QString::fromLatin1(f));
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
  form->addRow(tr("Bits"), bits_);
  form->addRow(tr("Group size"), group_);
  form->addRow(tr("MiLo iterations (max)"), iterations_);
  form->addRow(tr("Compensator storage"), compensator_);
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
  connect(method_, &QComboBox::currentIndexChanged, this, &JobsPanel::updateState);
  // Bits, group and compensator storage change the totals the policy editor shows.
  connect(bits_, &QSpinBox::valueChanged, this, &JobsPanel::settingsChanged);
  connect(group_, &QSpinBox::valueChanged, this, &JobsPanel::settingsChanged);
  connect(compensator_, &QComboBox::currentIndexChanged, this, &JobsPanel::settingsChanged);
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
  s.method = QuantMethod(method_->currentData().toInt());
  s.bits = bits_->value();
  s.group = group_->value();
  s.maxIterations = iterations_->value();
  s.compensator = compensator_->currentText();
  s.device = device_->currentData().toString();
  return s;
}

void JobsPanel::setSettings(const QuantSettings& s) {
  method_->setCurrentIndex(method_->findData(int(s.method)));
  bits_->setValue(s.bits);
  group_->setValue(s.group);
  iterations_->setValue(s.maxIterations);
  compensator_->setCurrentText(s.compensator);
  const int device = device_->findData(s.device.toLower());
  device_->setCurrentIndex(device >= 0 ? device : 0);
}

bool JobsPanel::onlyFiltered() const {
  return onlyFiltered_->isChecked();
}

void JobsPanel::updateState() {
  const bool running = session_->quantizationRunning();
  const bool milo = QuantMethod(method_->currentData().toInt()) == QuantMethod::Milo;
  iterations_->setEnabled(milo);
  compensator_->setEnabled(milo);
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

// SPDX-License-Identifier: MIT
#include "gpu_bench_panel.h"

#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPointer>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QtConcurrent>
#include <algorithm>

#include "jobs/job_status_line.h"
#include "moewb/error.h"
#include "moewb/quant/gemm_shapes.h"
#include "workbench_session.h"

namespace moewb::gui {

namespace {
// Item data of the shape list: the shape, and what it is in the open model ("" for a default shape
// the model does not have).
constexpr int kShapeRole = Qt::UserRole;
constexpr int kLabelRole = Qt::UserRole + 1;
constexpr int kFromModelRole = Qt::UserRole + 2;  // added for the open model (removed when another opens)

QListWidgetItem* checkable(QListWidget* list, const QString& text, const QVariant& data, bool checked) {
  auto* item = new QListWidgetItem(text, list);
  item->setData(kShapeRole, data);
  item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
  item->setCheckState(checked ? Qt::Checked : Qt::Unchecked);
  return item;
}
}  // namespace

GpuBenchPanel::GpuBenchPanel(WorkbenchSession* session, QWidget* parent)
    : QWidget(parent),
      session_(session),
      availabilityLabel_(new QLabel(tr("Looking for a CUDA GPU…"), this)),
      shapes_(new QListWidget(this)),
      extraShapes_(new QLineEdit(this)),
      rank_(new QSpinBox(this)),
      replays_(new QSpinBox(this)),
      symmetric_(new QCheckBox(tr("symmetric weights (zero fixed at 4)"), this)),
      bf16_(new QCheckBox(tr("bf16 activations"), this)),
      baselines_(new QCheckBox(tr("cuBLAS fp16 and dequantize + cuBLAS baselines"), this)),
      run_(new QPushButton(tr("Run benchmark"), this)),
      cancel_(new QPushButton(tr("Cancel"), this)),
      copyMarkdown_(new QPushButton(tr("Copy Markdown"), this)),
      status_(new JobStatusLine(session->jobs(), this)),
      table_(new QTableWidget(this)) {
  availabilityLabel_->setObjectName(QStringLiteral("gpuAvailability"));
  availabilityLabel_->setWordWrap(true);
  availabilityLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  QFont bold = availabilityLabel_->font();
  bold.setBold(true);
  availabilityLabel_->setFont(bold);
  for (const auto& [n, k] : defaultGemmShapes())
    checkable(shapes_, QStringLiteral("%1 × %2").arg(n).arg(k), QVariant::fromValue(QPoint(int(n), int(k))),
              true);
  auto* batchRow = new QHBoxLayout;
  for (int64_t m : defaultGemmBatches()) {
    auto* box = new QCheckBox(QString::number(m), this);
    box->setProperty("m", qlonglong(m));
    box->setChecked(true);  // all, as `moewb bench-gpu gemm` runs by default
    batches_.push_back(box);
    batchRow->addWidget(box);
  }
  batchRow->addStretch();
  shapes_->setMaximumHeight(6 + 8 * shapes_->sizeHintForRow(0) + 4);  // the defaults and a model's few
  extraShapes_->setPlaceholderText(tr("more shapes: NxK, NxK (out × in features)"));
  rank_->setRange(0, 128);
  rank_->setSingleStep(16);
  rank_->setValue(32);
  rank_->setToolTip(tr("Also time the fused low-rank compensator (MiLo's INT3 U, V) at this rank: 0 (skip) or a "
                       "multiple of 16 up to 128"));
  replays_->setRange(20, 1000);
  replays_->setValue(25);
  replays_->setToolTip(tr("Timed rounds, each one replay of a graph of at least 20 calls and one of at least 80 calls more; the median per-call slope is reported"));
  baselines_->setChecked(true);
  run_->setObjectName(QStringLiteral("runGpuBench"));
  copyMarkdown_->setEnabled(false);

  auto* form = new QFormLayout;
  form->addRow(tr("Weight shapes (N × K):"), shapes_);
  form->addRow(QString(), extraShapes_);
  form->addRow(tr("Batch sizes m:"), batchRow);
  form->addRow(tr("Compensator rank:"), rank_);
  form->addRow(tr("Replays:"), replays_);
  form->addRow(QString(), symmetric_);
  form->addRow(QString(), bf16_);
  form->addRow(QString(), baselines_);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(run_);
  buttons->addWidget(cancel_);
  buttons->addStretch();
  buttons->addWidget(copyMarkdown_);
  auto* top = new QHBoxLayout;
  top->addLayout(form, 1);
  auto* note = new QLabel(tr("The W3A16 GEMM (3-bit weights, fp16 activations) against cuBLAS fp16 and "
                             "dequantize + cuBLAS, with a CPU correctness check on fresh data every run: "
                             "the benchmark of <code>moewb bench-gpu gemm</code> (docs/benchmarks.md)."),
                          this);
  note->setWordWrap(true);
  top->addWidget(note, 1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(availabilityLabel_);
  layout->addLayout(top);
  layout->addLayout(buttons);
  layout->addWidget(status_);
  layout->addWidget(table_, 1);

  const QStringList headers{tr("N × K"),
                            tr("m"),
                            tr("CTAs"),
                            tr("W3A16 µs"),
                            tr("+comp µs"),
                            tr("cuBLAS µs"),
                            tr("deq+cuBLAS µs"),
                            tr("× vs cuBLAS"),
                            tr("× vs deq+cuBLAS"),
                            tr("GB/s"),
                            tr("% of copy"),
                            tr("rel err vs CPU"),
                            tr("rel err vs cuBLAS"),
                            tr("ok"),
                            tr("tensors")};
  table_->setColumnCount(int(headers.size()));
  table_->setHorizontalHeaderLabels(headers);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->verticalHeader()->hide();
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);

  connect(run_, &QPushButton::clicked, this, &GpuBenchPanel::run);
  connect(cancel_, &QPushButton::clicked, this, [this] {
    if (job_) session_->jobs()->cancel(job_);
  });
  connect(copyMarkdown_, &QPushButton::clicked, this,
          [this] { QApplication::clipboard()->setText(markdown_); });
  connect(session_->jobs(), &JobRunner::jobFinished, this, [this](int id) {
    if (id != job_) return;
    job_ = 0;
    updateButtons();
  });
  // Initialising the CUDA runtime can take a second (or time out on a broken driver): never on the GUI
  // thread.
  connect(&probe_, &QFutureWatcher<GpuAvailability>::finished, this, &GpuBenchPanel::onProbed);
  probe_.setFuture(QtConcurrent::run(&probeGpu));
  connect(session_, &WorkbenchSession::modelOpened, this, &GpuBenchPanel::showModelShapes);
  showModelShapes();
  updateButtons();
}

void GpuBenchPanel::showModelShapes() {
  // Forget the previous model's shapes (and its labels on the defaults).
  for (int i = shapes_->count() - 1; i >= 0; --i) {
    QListWidgetItem* item = shapes_->item(i);
    if (item->data(kFromModelRole).toBool())
      delete shapes_->takeItem(i);
    else {
      item->setData(kLabelRole, QString());
      item->setToolTip(QString());
    }
  }
  const auto catalog = session_->catalog();
  if (!catalog) return;
  for (const quant::ModelGemmShape& m : quant::modelGemmShapes(*catalog)) {
    const QPoint nk(int(m.shape.n), int(m.shape.k));
    const QString label = QString::fromStdString(m.kinds);
    const QString tip = tr("%1 of the open model's matrices (%2), e.g. %3")
                            .arg(m.matrices)
                            .arg(label, QString::fromStdString(m.first_tensor));
    QListWidgetItem* item = nullptr;
    for (int i = 0; i < shapes_->count() && !item; ++i)
      if (shapes_->item(i)->data(kShapeRole).toPoint() == nk) item = shapes_->item(i);
    if (!item) {
      item = checkable(shapes_, QStringLiteral("%1 × %2 — %3").arg(m.shape.n).arg(m.shape.k).arg(label), nk, false);
      item->setData(kFromModelRole, true);
    }
    item->setData(kLabelRole, label);
    if (quant::w3a16KernelTakes(m.shape)) {
      item->setToolTip(tip);
    } else {
      item->setFlags(item->flags() & ~(Qt::ItemIsEnabled | Qt::ItemIsUserCheckable));
      item->setToolTip(tip + QStringLiteral("\n") + tr("The W3A16 kernels need N and K to be multiples of 64."));
    }
  }
}

void GpuBenchPanel::onProbed() {
  availability_ = probe_.result();
  availabilityLabel_->setText(availabilityText());
  if (!availability_->deviceUsable) availabilityLabel_->setStyleSheet(QStringLiteral("color: #c0392b;"));
  updateButtons();
  emit availabilityKnown();
}

QString GpuBenchPanel::availabilityText() const {
  if (!availability_) return tr("Looking for a CUDA GPU…");
  if (availability_->deviceUsable) return tr("GPU: %1").arg(availability_->device);
  return availability_->message;
}

GpuGemmSettings GpuBenchPanel::settings() const {
  GpuGemmSettings s;
  for (int i = 0; i < shapes_->count(); ++i)
    if (shapes_->item(i)->checkState() == Qt::Checked) {
      const QPoint nk = shapes_->item(i)->data(kShapeRole).toPoint();
      s.shapes.emplace_back(nk.x(), nk.y());
      s.shapeLabels.push_back(shapes_->item(i)->data(kLabelRole).toString().toStdString());
    }
  static const QRegularExpression shape(QStringLiteral("^\\s*(\\d+)\\s*[xX×]\\s*(\\d+)\\s*$"));
  for (const QString& part : extraShapes_->text().split(QLatin1Char(','), Qt::SkipEmptyParts)) {
    const auto m = shape.match(part);
    if (m.hasMatch()) {
      s.shapes.emplace_back(m.captured(1).toLongLong(), m.captured(2).toLongLong());
      s.shapeLabels.emplace_back();
    }
  }
  // Labels only where one says something (the reports then add a column for them).
  if (std::all_of(s.shapeLabels.begin(), s.shapeLabels.end(), [](const std::string& l) { return l.empty(); }))
    s.shapeLabels.clear();
  for (const QCheckBox* box : batches_)
    if (box->isChecked()) s.batches.push_back(box->property("m").toLongLong());
  s.compensatorRank = rank_->value();
  s.replays = replays_->value();
  s.symmetric = symmetric_->isChecked();
  s.bf16 = bf16_->isChecked();
  s.baselines = baselines_->isChecked();
  return s;
}

int GpuBenchPanel::run() {
  if (!availability_ || !availability_->deviceUsable) {
    status_->showError(availabilityText());
    return 0;
  }
  const GpuGemmSettings s = settings();
  for (const QString& part : extraShapes_->text().split(QLatin1Char(','), Qt::SkipEmptyParts))
    if (!QRegularExpression(QStringLiteral("^\\s*\\d+\\s*[xX×]\\s*\\d+\\s*$")).match(part).hasMatch()) {
      status_->showError(tr("Shape '%1': expected NxK, e.g. 14336x4096").arg(part.trimmed()));
      return 0;
    }
  if (s.shapes.empty() || s.batches.empty()) {
    status_->showError(tr("Choose at least one shape and one batch size."));
    return 0;
  }
  QPointer<GpuBenchPanel> self(this);
  job_ = session_->jobs()->submit(tr("W3A16 GEMM benchmark"), [self, s](const ProgressFn& progress) {
    auto result = std::make_shared<GpuGemmResult>(runGpuGemmBenchmark(s, progress));
    QMetaObject::invokeMethod(
        self.data(),
        [self, result] {
          if (self) self->showResult(*result);
        },
        Qt::QueuedConnection);
  });
  status_->track(job_);
  updateButtons();
  return job_;
}

void GpuBenchPanel::showResult(const GpuGemmResult& result) {
  markdown_ = result.markdown;
  status_->track(0);  // the summary below replaces the job's "done" line
  table_->setRowCount(int(result.rows.size()));
  auto put = [this](int row, int column, const QString& text) {
    auto* item = new QTableWidgetItem(text);
    item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    table_->setItem(row, column, item);
  };
  auto us = [](double v) { return v > 0 ? QString::number(v, 'f', 2) : QStringLiteral("—"); };
  for (int i = 0; i < int(result.rows.size()); ++i) {
    const GpuGemmRow& r = result.rows[std::size_t(i)];
    put(i, 0, QStringLiteral("%1 × %2").arg(r.n).arg(r.k));
    put(i, 1, QString::number(r.m));
    put(i, 2, QString::number(r.ctas));
    put(i, 3, us(r.w3a16Us));
    put(i, 4, us(r.w3a16CompUs));
    put(i, 5, us(r.cublasUs));
    put(i, 6, us(r.dequantCublasUs));
    put(i, 7, r.speedupVsCublas > 0 ? QString::number(r.speedupVsCublas, 'f', 2) : QStringLiteral("—"));
    put(i, 8, r.speedupVsDequant > 0 ? QString::number(r.speedupVsDequant, 'f', 2) : QStringLiteral("—"));
    put(i, 9, QString::number(r.gbps, 'f', 0));
    put(i, 10, QString::number(r.pctOfCopy, 'f', 1));
    put(i, 11, QString::number(r.relErrCpu, 'e', 2));
    put(i, 12, r.relErrVsCublas > 0 ? QString::number(r.relErrVsCublas, 'e', 2) : QStringLiteral("—"));
    put(i, 13, r.correct ? tr("ok") : tr("FAILED"));
    if (!r.correct) table_->item(i, 13)->setForeground(QColor(192, 57, 43));
    table_->setItem(i, 14, new QTableWidgetItem(r.label));  // what the shape is in the open model
  }
  status_->showMessage(tr("%1 — copy bandwidth %2 GB/s; %3")
                           .arg(result.device)
                           .arg(result.copyGbps, 0, 'f', 0)
                           .arg(result.allCorrect ? tr("every result matches the CPU reference")
                                                  : tr("A CORRECTNESS CHECK FAILED (see the ok column)")));
  copyMarkdown_->setEnabled(!markdown_.isEmpty());
}

void GpuBenchPanel::updateButtons() {
  const bool usable = availability_ && availability_->deviceUsable;
  run_->setEnabled(usable && job_ == 0);
  cancel_->setEnabled(job_ != 0);
  for (QWidget* w :
       std::initializer_list<QWidget*>{shapes_, extraShapes_, rank_, replays_, symmetric_, bf16_, baselines_})
    w->setEnabled(usable);
  for (QCheckBox* box : batches_) box->setEnabled(usable);
}

}  // namespace moewb::gui

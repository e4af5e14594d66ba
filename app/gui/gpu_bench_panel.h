// SPDX-License-Identifier: MIT
#pragma once
#include <QFutureWatcher>
#include <QWidget>
#include <optional>
#include <vector>

#include "gpu_benchmark.h"

class QLabel;
class QListWidget;
class QLineEdit;
class QSpinBox;
class QCheckBox;
class QPushButton;
class QTableWidget;

namespace moewb::gui {
class WorkbenchSession;
class JobStatusLine;

// The W3A16 GEMM benchmark of `moewb bench-gpu gemm`, run in the background with shape and batch
// selectors; the table gives µs, speedups vs cuBLAS fp16 and dequantize + cuBLAS, errors and ok. Where
// the build has no CUDA or the machine no usable GPU, the panel says so and nothing can be started. The
// open model's matrix shapes are offered besides the defaults (as `moewb bench gemm --model` times them).
class GpuBenchPanel : public QWidget {
  Q_OBJECT
 public:
  GpuBenchPanel(WorkbenchSession* session, QWidget* parent = nullptr);

  // Known once the background probe answered (availabilityKnown()).
  std::optional<GpuAvailability> availability() const { return availability_; }
  QString availabilityText() const;
  GpuGemmSettings settings() const;
  int run();  // 0 (and why on the status line) when the benchmark cannot start
  QPushButton* runButton() const { return run_; }
  QTableWidget* table() const { return table_; }
  // The shape selector: the benchmark's defaults, then the open model's distinct matrix shapes (unchecked,
  // labelled with what they are; disabled where the kernels cannot hold them).
  QListWidget* shapeList() const { return shapes_; }
  void showResult(const GpuGemmResult& result);

 signals:
  void availabilityKnown();

 private:
  void onProbed();
  void showModelShapes();
  void updateButtons();
  WorkbenchSession* session_;
  QLabel* availabilityLabel_;
  QListWidget* shapes_;
  QLineEdit* extraShapes_;
  std::vector<QCheckBox*> batches_;
  QSpinBox* rank_;
  QSpinBox* replays_;
  QCheckBox* symmetric_;
  QCheckBox* bf16_;
  QCheckBox* baselines_;
  QPushButton* run_;
  QPushButton* cancel_;
  QPushButton* copyMarkdown_;
  JobStatusLine* status_;
  QTableWidget* table_;
  QFutureWatcher<GpuAvailability> probe_;
  std::optional<GpuAvailability> availability_;
  QString markdown_;
  int job_ = 0;
};

}  // namespace moewb::gui

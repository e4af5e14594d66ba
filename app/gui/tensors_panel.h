// SPDX-License-Identifier: MIT
#pragma once
#include <QWidget>

class QLineEdit;
class QLabel;
class QTableView;

namespace moewb::gui {
class WorkbenchSession;
class TensorFilterProxy;

// The sortable tensor table with the `moewb stats --filter` language in a line edit above it.
class TensorsPanel : public QWidget {
  Q_OBJECT
 public:
  TensorsPanel(WorkbenchSession* session, QWidget* parent = nullptr);
  TensorFilterProxy* proxy() const { return proxy_; }
  QLineEdit* filterEdit() const { return filter_; }
  QTableView* table() const { return table_; }
  // Matrix indices of the rows the filter currently shows (for "quantize only these").
  std::vector<std::size_t> visibleMatrices() const;
  void selectMatrix(std::size_t matrix);

 signals:
  void matrixActivated(std::size_t matrix);

 private:
  void applyFilter();
  void updateCount();  // "N of M tensors", or why the typed filter is not valid
  WorkbenchSession* session_;
  QString filter_error_;
  TensorFilterProxy* proxy_;
  QLineEdit* filter_;
  QLabel* status_;
  QTableView* table_;
};

}  // namespace moewb::gui

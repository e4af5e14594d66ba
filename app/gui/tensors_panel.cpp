// SPDX-License-Identifier: MIT
#include "tensors_panel.h"

#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QTableView>
#include <QVBoxLayout>

#include "models/tensor_filter_proxy.h"
#include "models/tensor_table_model.h"
#include "workbench_session.h"

namespace moewb::gui {

TensorsPanel::TensorsPanel(WorkbenchSession* session, QWidget* parent)
    : QWidget(parent),
      session_(session),
      proxy_(new TensorFilterProxy(this)),
      filter_(new QLineEdit(this)),
      status_(new QLabel(this)),
      table_(new QTableView(this)) {
  proxy_->setSourceModel(session_->tensorModel());
  filter_->setPlaceholderText(
      tr("Filter, e.g.  layer:3 block:expert kurtosis>1   (same syntax as moewb stats --filter)"));
  filter_->setClearButtonEnabled(true);
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(-1, Qt::AscendingOrder);  // checkpoint order until the user sorts
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->verticalHeader()->setDefaultSectionSize(20);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
  table_->horizontalHeader()->setDefaultSectionSize(78);
  table_->setColumnWidth(TensorTableModel::Name, 380);
  table_->setColumnWidth(TensorTableModel::Layer, 50);
  table_->setColumnWidth(TensorTableModel::Expert, 56);
  table_->setColumnWidth(TensorTableModel::Shape, 104);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(filter_);
  layout->addWidget(status_);
  layout->addWidget(table_);
  connect(filter_, &QLineEdit::textChanged, this, &TensorsPanel::applyFilter);
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& current) {
            const qlonglong m = current.data(TensorTableModel::MatrixIndexRole).toLongLong();
            if (m >= 0) emit matrixActivated(std::size_t(m));
          });
  // Rows arriving (statistics come in batches) are filtered by the proxy itself (dynamic filter); only the
  // count is updated here. Re-applying the filter from inside the proxy's own signals corrupted its row
  // mapping (tensors shown several times, "481 of 127 tensors").
  connect(proxy_, &QAbstractItemModel::rowsInserted, this, &TensorsPanel::updateCount);
  connect(proxy_, &QAbstractItemModel::rowsRemoved, this, &TensorsPanel::updateCount);
  connect(proxy_, &QAbstractItemModel::modelReset, this, &TensorsPanel::updateCount);
  applyFilter();
}

void TensorsPanel::applyFilter() {
  QString error;
  const bool ok = proxy_->setFilterExpression(filter_->text(), &error);
  // Keep the last valid filter applied while the user is typing, and say what is wrong.
  QPalette pal = filter_->palette();
  pal.setColor(QPalette::Text, ok ? palette().color(QPalette::Text) : QColor(200, 40, 40));
  filter_->setPalette(pal);
  filter_error_ = ok ? QString() : error;
  updateCount();
}

void TensorsPanel::updateCount() {
  status_->setText(filter_error_.isEmpty()
                       ? tr("%1 of %2 tensors").arg(proxy_->rowCount()).arg(session_->tensorModel()->rowCount())
                       : filter_error_);
}

std::vector<std::size_t> TensorsPanel::visibleMatrices() const {
  std::vector<std::size_t> out;
  for (int r = 0; r < proxy_->rowCount(); ++r) {
    const qlonglong m = proxy_->index(r, 0).data(TensorTableModel::MatrixIndexRole).toLongLong();
    if (m >= 0) out.push_back(std::size_t(m));
  }
  std::sort(out.begin(), out.end());
  return out;
}

void TensorsPanel::selectMatrix(std::size_t matrix) {
  const QModelIndex source = session_->tensorModel()->index(int(matrix), 0);
  const QModelIndex index = proxy_->mapFromSource(source);
  if (index.isValid()) table_->setCurrentIndex(index);
}

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#include "heatmap/heatmap_interaction.h"

#include <QMouseEvent>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>

namespace moewb::gui {

HeatmapInteraction::HeatmapInteraction(QObject* parent) : QObject(parent) {}

void HeatmapInteraction::setData(HeatmapData data) {
  const bool sameShape = data.rows() == data_.rows() && data.columns() == data_.columns();
  data_ = std::move(data);
  scale_ = ColourScale::fit(data_);
  ++revision_;
  if (!sameShape) {
    selected_.assign(std::size_t(data_.rows()) * std::size_t(data_.columns()), 0);
    hover_ = {-1, -1};
    fitted_ = false;
    fitToView();
  }
}

void HeatmapInteraction::setWidgetSize(QSize size) {
  if (size == size_) return;
  size_ = size;
  // Until the user zooms, a resize refits so the whole model stays in view.
  if (!fitted_ || zoom_ == 1.0) fitToView();
  clampPan();
}

QRectF HeatmapInteraction::plotArea() const {
  return QRectF(kLeftMargin, kTopMargin, std::max(1.0, size_.width() - kLeftMargin - kRightMargin),
                std::max(1.0, size_.height() - kTopMargin - kBottomMargin));
}

QRectF HeatmapInteraction::cellRect(int row, int column) const {
  const QRectF p = plotArea();
  return QRectF(p.left() + pan_.x() + column * cellWidth(), p.top() + pan_.y() + row * cellHeight(),
                cellWidth(), cellHeight());
}

QPoint HeatmapInteraction::cellAt(QPointF pos) const {
  const QRectF p = plotArea();
  if (!p.contains(pos) || data_.empty()) return {-1, -1};
  const int c = int(std::floor((pos.x() - p.left() - pan_.x()) / cellWidth()));
  const int r = int(std::floor((pos.y() - p.top() - pan_.y()) / cellHeight()));
  if (r < 0 || c < 0 || r >= data_.rows() || c >= data_.columns()) return {-1, -1};
  return {c, r};
}

HeatmapInteraction::Visible HeatmapInteraction::visibleCells() const {
  const QRectF p = plotArea();
  Visible v;
  v.firstColumn = std::max(0, int(std::floor(-pan_.x() / cellWidth())));
  v.lastColumn = std::min(data_.columns() - 1, int(std::floor((p.width() - pan_.x()) / cellWidth())));
  v.firstRow = std::max(0, int(std::floor(-pan_.y() / cellHeight())));
  v.lastRow = std::min(data_.rows() - 1, int(std::floor((p.height() - pan_.y()) / cellHeight())));
  return v;
}

void HeatmapInteraction::fitToView() {
  if (data_.empty()) return;
  const QRectF p = plotArea();
  // Cells fill the plot area, but never become absurdly large for tiny models (4 layers × 10 columns).
  const double cw = std::clamp(p.width() / data_.columns(), 0.5, 140.0);
  const double ch = std::clamp(p.height() / data_.rows(), 0.5, 90.0);
  baseCell_ = cw;
  aspect_ = ch / cw;
  zoom_ = 1.0;
  pan_ = {0, 0};
  fitted_ = true;
  emit viewChanged();
}

void HeatmapInteraction::zoomAt(QPointF pos, double factor) {
  const double newZoom = std::clamp(zoom_ * factor, 1.0, 64.0);  // never smaller than "whole model"
  factor = newZoom / zoom_;
  if (factor == 1.0) return;
  // Keep the point under the cursor fixed: grid coordinate g = pos - origin - pan scales with the zoom.
  const QPointF origin = plotArea().topLeft();
  const QPointF g = pos - origin - pan_;
  pan_ = pos - origin - g * factor;
  zoom_ = newZoom;
  clampPan();
  emit viewChanged();
}

void HeatmapInteraction::panBy(QPointF delta) {
  pan_ += delta;
  clampPan();
  emit viewChanged();
}

void HeatmapInteraction::clampPan() {
  const QRectF p = plotArea();
  const double gridW = cellWidth() * data_.columns(), gridH = cellHeight() * data_.rows();
  // The grid may not be dragged out of view: its far edge stays at or beyond the plot's far edge.
  const double minX = std::min(0.0, p.width() - gridW), minY = std::min(0.0, p.height() - gridH);
  pan_.setX(std::clamp(pan_.x(), minX, 0.0));
  pan_.setY(std::clamp(pan_.y(), minY, 0.0));
}

bool HeatmapInteraction::isSelected(int row, int column) const {
  const std::size_t i = std::size_t(row) * std::size_t(data_.columns()) + std::size_t(column);
  return i < selected_.size() && selected_[i];
}

std::vector<QPoint> HeatmapInteraction::selectedCells() const {
  std::vector<QPoint> out;
  for (int r = 0; r < data_.rows(); ++r)
    for (int c = 0; c < data_.columns(); ++c)
      if (isSelected(r, c)) out.emplace_back(c, r);
  return out;
}

void HeatmapInteraction::setSelectedCells(const std::vector<QPoint>& cells) {
  std::fill(selected_.begin(), selected_.end(), 0);
  for (QPoint p : cells)
    if (p.y() >= 0 && p.x() >= 0 && p.y() < data_.rows() && p.x() < data_.columns())
      selected_[std::size_t(p.y()) * std::size_t(data_.columns()) + std::size_t(p.x())] = 1;
  emit selectionChanged();
}

void HeatmapInteraction::clearSelection() {
  setSelectedCells({});
}

QRectF HeatmapInteraction::rubberBand() const {
  if (drag_ != Drag::Range || !moved_) return {};
  return QRectF(pressPos_, lastPos_).normalized();
}

bool HeatmapInteraction::mousePress(QMouseEvent* e) {
  pressPos_ = lastPos_ = e->position();
  moved_ = false;
  pressCell_ = cellAt(e->position());
  lasso_.clear();
  if (e->button() == Qt::MiddleButton ||
      (e->button() == Qt::LeftButton && (e->modifiers() & Qt::AltModifier))) {
    drag_ = Drag::Pan;
  } else if (e->button() == Qt::LeftButton && (e->modifiers() & Qt::ShiftModifier)) {
    drag_ = Drag::Lasso;
    lasso_ << e->position();
  } else if (e->button() == Qt::LeftButton) {
    drag_ = Drag::Range;
  } else if (e->button() == Qt::RightButton) {
    // Right-clicking an unselected cell selects it first, so the menu acts on what is under the mouse.
    if (pressCell_.x() >= 0 && !isSelected(pressCell_.y(), pressCell_.x())) setSelectedCells({pressCell_});
    emit contextMenuRequested(e->globalPosition().toPoint());
    return true;
  }
  return false;
}

bool HeatmapInteraction::mouseMove(QMouseEvent* e) {
  const QPointF pos = e->position();
  const QPoint newHover = cellAt(pos);
  bool repaint = newHover != hover_ || newHover.x() >= 0;  // the tooltip follows the mouse
  hover_ = newHover;
  hoverPos_ = pos;
  if (drag_ != Drag::None) {
    if ((pos - pressPos_).manhattanLength() > 3) moved_ = true;
    if (drag_ == Drag::Pan) panBy(pos - lastPos_);
    if (drag_ == Drag::Lasso) lasso_ << pos;
    repaint = true;
  }
  lastPos_ = pos;
  return repaint;
}

bool HeatmapInteraction::mouseRelease(QMouseEvent* e) {
  const Drag drag = std::exchange(drag_, Drag::None);
  const bool add = e->modifiers() & Qt::ControlModifier;
  if (drag == Drag::Range && !moved_) {
    if (pressCell_.x() < 0) {
      if (!add) clearSelection();
      return true;
    }
    const std::size_t i =
        std::size_t(pressCell_.y()) * std::size_t(data_.columns()) + std::size_t(pressCell_.x());
    if (add) {
      selected_[i] = !selected_[i];
      emit selectionChanged();
    } else {
      setSelectedCells({pressCell_});
    }
    emit cellClicked(pressCell_.y(), pressCell_.x());
  } else if (drag == Drag::Range) {
    // Clamp both corners into the grid so a drag that starts or ends in the margin still selects.
    auto clampCell = [&](QPointF pos) {
      const QRectF p = plotArea();
      const int c =
          std::clamp(int(std::floor((pos.x() - p.left() - pan_.x()) / cellWidth())), 0, data_.columns() - 1);
      const int r =
          std::clamp(int(std::floor((pos.y() - p.top() - pan_.y()) / cellHeight())), 0, data_.rows() - 1);
      return QPoint(c, r);
    };
    selectRect(clampCell(pressPos_), clampCell(e->position()), add);
  } else if (drag == Drag::Lasso) {
    lasso_ << e->position();
    if (lasso_.size() >= 3) selectLasso(add);
    lasso_.clear();
  }
  moved_ = false;
  return true;
}

void HeatmapInteraction::selectRect(QPoint a, QPoint b, bool add) {
  if (data_.empty()) return;
  if (!add) std::fill(selected_.begin(), selected_.end(), 0);
  for (int r = std::min(a.y(), b.y()); r <= std::max(a.y(), b.y()); ++r)
    for (int c = std::min(a.x(), b.x()); c <= std::max(a.x(), b.x()); ++c)
      selected_[std::size_t(r) * std::size_t(data_.columns()) + std::size_t(c)] = 1;
  emit selectionChanged();
}

void HeatmapInteraction::selectLasso(bool add) {
  if (!add) std::fill(selected_.begin(), selected_.end(), 0);
  const Visible v = visibleCells();
  for (int r = v.firstRow; r <= v.lastRow; ++r)
    for (int c = v.firstColumn; c <= v.lastColumn; ++c)
      if (lasso_.containsPoint(cellRect(r, c).center(), Qt::OddEvenFill))
        selected_[std::size_t(r) * std::size_t(data_.columns()) + std::size_t(c)] = 1;
  emit selectionChanged();
}

bool HeatmapInteraction::wheel(QWheelEvent* e) {
  const double steps = e->angleDelta().y() / 120.0;
  if (steps == 0) return false;
  zoomAt(e->position(), std::pow(1.2, steps));
  return true;
}

bool HeatmapInteraction::leave() {
  const bool had = hover_.x() >= 0;
  hover_ = {-1, -1};
  return had;
}

}  // namespace moewb::gui

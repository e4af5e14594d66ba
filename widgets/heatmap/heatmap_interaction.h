// SPDX-License-Identifier: MIT
#pragma once
#include <QObject>
#include <QPoint>
#include <QPolygonF>
#include <QRectF>
#include <QSize>
#include <vector>

#include "heatmap/heatmap_data.h"

class QMouseEvent;
class QWheelEvent;

namespace moewb::gui {

// Geometry, zoom/pan and selection of a heatmap, shared by the OpenGL (Dear ImGui) canvas and the QPainter
// fallback so both behave identically and the behaviour can be tested without any GL context.
//
// Mouse: wheel zooms around the cursor; middle-drag (or Alt+left-drag) pans; left click selects a cell
// (Ctrl toggles); left-drag selects the rectangle of cells it spans; Shift+left-drag draws a lasso and
// selects the cells whose centres fall inside; right click asks for the context menu.
class HeatmapInteraction : public QObject {
  Q_OBJECT
 public:
  static constexpr double kLeftMargin = 110, kTopMargin = 28, kBottomMargin = 46, kRightMargin = 8;

  explicit HeatmapInteraction(QObject* parent = nullptr);

  void setData(HeatmapData data);  // keeps zoom when the shape is unchanged (metric switch, live updates)
  const HeatmapData& data() const { return data_; }
  const ColourScale& scale() const { return scale_; }
  // Changes with every setData(): canvases that cache the cells as an image rebuild it when it moves.
  int dataRevision() const { return revision_; }

  void setWidgetSize(QSize size);
  QSize widgetSize() const { return size_; }
  QRectF plotArea() const;
  double cellWidth() const { return baseCell_ * zoom_; }
  double cellHeight() const { return baseCell_ * zoom_ * aspect_; }
  QRectF cellRect(int row, int column) const;
  // Row/column under a widget position, or (-1, -1).
  QPoint cellAt(QPointF pos) const;
  // Inclusive ranges of rows/columns that intersect the plot area (first > last when none).
  struct Visible {
    int firstRow, lastRow, firstColumn, lastColumn;
  };
  Visible visibleCells() const;
  void fitToView();
  void zoomAt(QPointF pos, double factor);
  void panBy(QPointF delta);

  bool isSelected(int row, int column) const;
  std::vector<QPoint> selectedCells() const;  // (x = column, y = row)
  void setSelectedCells(const std::vector<QPoint>& cells);
  void clearSelection();
  QPoint hoverCell() const { return hover_; }
  QPointF hoverPos() const { return hoverPos_; }
  // Rubber band (range drag) or lasso being drawn, in widget coordinates; empty when none.
  QRectF rubberBand() const;
  const QPolygonF& lasso() const { return lasso_; }

  // Event entry points; return true when the canvas must repaint.
  bool mousePress(QMouseEvent* e);
  bool mouseMove(QMouseEvent* e);
  bool mouseRelease(QMouseEvent* e);
  bool wheel(QWheelEvent* e);
  bool leave();

 signals:
  void cellClicked(int row, int column);
  void selectionChanged();
  void contextMenuRequested(QPoint globalPos);
  void viewChanged();

 private:
  enum class Drag { None, Range, Lasso, Pan };
  void clampPan();
  void selectRect(QPoint a, QPoint b, bool add);
  void selectLasso(bool add);

  HeatmapData data_;
  ColourScale scale_;
  QSize size_{640, 400};
  double baseCell_ = 16, zoom_ = 1, aspect_ = 1;
  QPointF pan_{0, 0};
  std::vector<char> selected_;
  QPoint hover_{-1, -1};
  QPointF hoverPos_;
  Drag drag_ = Drag::None;
  QPointF pressPos_, lastPos_;
  QPoint pressCell_{-1, -1};
  bool moved_ = false;
  QPolygonF lasso_;
  bool fitted_ = false;
  int revision_ = 0;
};

}  // namespace moewb::gui

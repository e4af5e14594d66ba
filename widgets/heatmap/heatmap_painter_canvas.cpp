// SPDX-License-Identifier: MIT
#include "heatmap/heatmap_painter_canvas.h"

#include <QLinearGradient>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>

#include "heatmap/heatmap_colours.h"
#include "heatmap/heatmap_image.h"
#include "heatmap/heatmap_interaction.h"

namespace moewb::gui {

HeatmapPainterCanvas::HeatmapPainterCanvas(HeatmapInteraction* interaction, QWidget* parent)
    : QWidget(parent), interaction_(interaction) {
  setMouseTracking(true);
  setMinimumSize(240, 160);
  connect(interaction_, &HeatmapInteraction::viewChanged, this, qOverload<>(&QWidget::update));
  connect(interaction_, &HeatmapInteraction::selectionChanged, this, qOverload<>(&QWidget::update));
}

void HeatmapPainterCanvas::paintEvent(QPaintEvent*) {
  QPainter p(this);
  const QPalette pal = palette();
  const bool dark = pal.color(QPalette::Window).lightness() < 128;
  p.fillRect(rect(), pal.color(QPalette::Base));
  const HeatmapInteraction& in = *interaction_;
  const HeatmapData& d = in.data();
  if (d.empty()) {
    p.setPen(pal.color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignCenter, tr("No data yet"));
    return;
  }
  const QRectF plot = in.plotArea();
  const auto v = in.visibleCells();
  const double cw = in.cellWidth(), ch = in.cellHeight();
  const double gap = (cw >= 8 && ch >= 8) ? 1.0 : 0.0;
  p.save();
  p.setClipRect(plot);
  if (drawsCellsAsImage(d)) {
    if (imageRevision_ != in.dataRevision() || imageDark_ != dark || cellImage_.isNull()) {
      cellImage_ = heatmapCellImage(d, in.scale(), dark);
      imageRevision_ = in.dataRevision();
      imageDark_ = dark;
    }
    const QRectF grid(in.cellRect(0, 0).topLeft(), in.cellRect(d.rows() - 1, d.columns() - 1).bottomRight());
    p.setRenderHint(QPainter::SmoothPixmapTransform, false);  // cells stay sharp-edged when zoomed
    p.drawImage(grid, cellImage_);
  } else {
    for (int r = v.firstRow; r <= v.lastRow; ++r) {
      for (int c = v.firstColumn; c <= v.lastColumn; ++c) {
        const float t = in.scale().normalise(d.value(r, c));
        const QRectF cell = in.cellRect(r, c).adjusted(0, 0, -gap, -gap);
        p.fillRect(cell, std::isnan(t) ? emptyCellColour(dark) : rampColour(t));
      }
    }
  }
  p.setPen(QPen(pal.color(QPalette::Highlight), 2));
  p.setBrush(Qt::NoBrush);
  for (int r = v.firstRow; r <= v.lastRow; ++r)
    for (int c = v.firstColumn; c <= v.lastColumn; ++c)
      if (in.isSelected(r, c)) p.drawRect(in.cellRect(r, c).adjusted(1, 1, -1, -1));
  const QPoint hover = in.hoverCell();
  if (hover.x() >= 0) {
    p.setPen(QPen(dark ? Qt::white : Qt::black, 1.5));
    p.drawRect(in.cellRect(hover.y(), hover.x()));
  }
  if (!in.rubberBand().isEmpty()) {
    p.setPen(QPen(pal.color(QPalette::Highlight), 1, Qt::DashLine));
    p.drawRect(in.rubberBand());
  }
  if (in.lasso().size() > 1) {
    p.setPen(QPen(pal.color(QPalette::Highlight), 1.5));
    p.drawPolyline(in.lasso());
  }
  if (!d.annotations.empty()) {
    const QFontMetrics fm(font());
    QColor background = pal.color(QPalette::Base);
    background.setAlpha(210);
    for (const HeatmapData::Annotation& a : d.annotations) {
      const QRectF cell = in.cellRect(a.row, a.column);
      const double width = fm.horizontalAdvance(a.text) + 4;
      const QPointF at =
          a.rightAligned ? QPointF(cell.right() - 3 - width, cell.top() + 2) : cell.topLeft() + QPointF(3, 2);
      const QRectF box(at, QSizeF(width, fm.height() + 2));
      p.fillRect(box.translated(-2, -1), background);
      p.setPen(pal.color(QPalette::Text));
      p.drawText(box, Qt::AlignLeft | Qt::AlignTop, a.text);
    }
  }
  p.restore();

  // Labels: only every n-th one when cells are smaller than the text.
  p.setPen(pal.color(QPalette::Text));
  const QFontMetrics fm(font());
  const int rowStride = labelStride(ch, fm.height());
  for (int r = v.firstRow; r <= v.lastRow; ++r) {
    if (r % rowStride) continue;
    const QRectF cell = in.cellRect(r, 0);
    p.drawText(QRectF(4, cell.top(), plot.left() - 8, ch), Qt::AlignRight | Qt::AlignVCenter, d.rowLabels[r]);
  }
  int widest = 0;
  for (const QString& l : d.columnLabels) widest = std::max(widest, fm.horizontalAdvance(l));
  const int colStride = labelStride(cw, widest + 6);
  for (int c = v.firstColumn; c <= v.lastColumn; ++c) {
    if (c % colStride) continue;
    const QRectF cell = in.cellRect(0, c);
    p.drawText(QRectF(cell.left(), 4, std::max(cw, double(widest)), plot.top() - 6),
               Qt::AlignLeft | Qt::AlignBottom, d.columnLabels[c]);
  }

  // Legend: colour ramp with its range and the metric name.
  const QRectF bar(plot.left(), height() - HeatmapInteraction::kBottomMargin + 10,
                   std::min(320.0, plot.width()), 12);
  QLinearGradient g(bar.topLeft(), bar.topRight());
  for (int i = 0; i <= 8; ++i) g.setColorAt(i / 8.0, rampColour(float(i) / 8.f));
  p.fillRect(bar, g);
  const ColourScale& s = in.scale();
  auto shown = [&](float x) { return formatValue(s.log ? std::pow(10.f, x) : x); };
  p.drawText(QPointF(bar.left(), bar.bottom() + fm.ascent() + 2), shown(s.low));
  const QString hi = shown(s.high);
  p.drawText(QPointF(bar.right() - fm.horizontalAdvance(hi), bar.bottom() + fm.ascent() + 2), hi);
  p.drawText(QPointF(bar.right() + 12, bar.center().y() + fm.ascent() / 2.0),
             d.metric + (s.log ? tr(" (log colour)") : QString()));

  // Tooltip drawn in place (QToolTip would need a real window system and lags behind the cursor).
  if (hover.x() >= 0) {
    const QString text = cellTooltip(d, hover.y(), hover.x());
    QRectF box = fm.boundingRect(QRect(0, 0, 600, 200), Qt::AlignLeft, text).adjusted(-6, -4, 6, 4);
    box.moveTopLeft(in.hoverPos() + QPointF(14, 14));
    if (box.right() > width()) box.moveRight(in.hoverPos().x() - 8);
    if (box.bottom() > height()) box.moveBottom(in.hoverPos().y() - 8);
    p.setPen(pal.color(QPalette::ToolTipText));
    p.setBrush(pal.color(QPalette::ToolTipBase));
    p.drawRect(box);
    p.drawText(box.adjusted(6, 4, -6, -4), Qt::AlignLeft, text);
  }
}

void HeatmapPainterCanvas::resizeEvent(QResizeEvent*) {
  interaction_->setWidgetSize(size());
}
void HeatmapPainterCanvas::mousePressEvent(QMouseEvent* e) {
  if (interaction_->mousePress(e)) update();
}
void HeatmapPainterCanvas::mouseMoveEvent(QMouseEvent* e) {
  if (interaction_->mouseMove(e)) update();
}
void HeatmapPainterCanvas::mouseReleaseEvent(QMouseEvent* e) {
  if (interaction_->mouseRelease(e)) update();
}
void HeatmapPainterCanvas::wheelEvent(QWheelEvent* e) {
  if (interaction_->wheel(e)) update();
  e->accept();
}
void HeatmapPainterCanvas::leaveEvent(QEvent*) {
  if (interaction_->leave()) update();
}

}  // namespace moewb::gui

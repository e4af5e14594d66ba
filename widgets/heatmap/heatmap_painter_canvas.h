// SPDX-License-Identifier: MIT
#pragma once
#include <QImage>
#include <QWidget>

namespace moewb::gui {
class HeatmapInteraction;

// The heatmap drawn with QPainter: used when no OpenGL context can be created (offscreen platform,
// remote X without GLX, MOEWB_NO_GL=1) so the view degrades instead of hanging or staying blank.
class HeatmapPainterCanvas : public QWidget {
  Q_OBJECT
 public:
  HeatmapPainterCanvas(HeatmapInteraction* interaction, QWidget* parent = nullptr);

 protected:
  void paintEvent(QPaintEvent*) override;
  void resizeEvent(QResizeEvent*) override;
  void mousePressEvent(QMouseEvent*) override;
  void mouseMoveEvent(QMouseEvent*) override;
  void mouseReleaseEvent(QMouseEvent*) override;
  void wheelEvent(QWheelEvent*) override;
  void leaveEvent(QEvent*) override;

 private:
  HeatmapInteraction* interaction_;
  // Large grids (heatmap_image.h) are drawn from one cached image, rebuilt when the data changes.
  QImage cellImage_;
  int imageRevision_ = -1;
  bool imageDark_ = false;
};

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#pragma once
#include <QElapsedTimer>
#include <QOpenGLWidget>

struct ImGuiContext;

namespace moewb::gui {
class HeatmapInteraction;

// The heatmap drawn by Dear ImGui inside a QOpenGLWidget: cells go to one draw list with culling to the
// visible range, so a 58 × 256 DeepSeek-V3 map (15k cells) redraws within a frame while zooming.
// Each canvas owns its own ImGui context (several heatmaps may be open). Qt delivers the input; ImGui
// only renders and shows the tooltip. Use HeatmapView::openGlUsable() before creating one.
class HeatmapGlCanvas : public QOpenGLWidget {
  Q_OBJECT
 public:
  HeatmapGlCanvas(HeatmapInteraction* interaction, QWidget* parent = nullptr);
  ~HeatmapGlCanvas() override;

 protected:
  void initializeGL() override;
  void resizeGL(int w, int h) override;
  void paintGL() override;
  void mousePressEvent(QMouseEvent*) override;
  void mouseMoveEvent(QMouseEvent*) override;
  void mouseReleaseEvent(QMouseEvent*) override;
  void wheelEvent(QWheelEvent*) override;
  void leaveEvent(QEvent*) override;

 private:
  void shutdownImGui();
  void drawHeatmap();
  // Large grids (heatmap_image.h) are one texture: rebuilt when the data or the theme changed.
  bool updateCellTexture(bool dark);
  HeatmapInteraction* interaction_;
  unsigned int cellTexture_ = 0;  // GLuint; 0 = none
  int textureRevision_ = -1;
  bool textureDark_ = false;
  ImGuiContext* imgui_ = nullptr;
  QElapsedTimer frameClock_;
  Qt::MouseButtons buttons_;
};

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#include "heatmap/heatmap_view.h"

#include <QFileDialog>
#include <QGuiApplication>
#include <QMenu>
#include <QMessageBox>
#include <QOffscreenSurface>
#include <QOpenGLContext>
#include <QVBoxLayout>

#include "heatmap/heatmap_export.h"
#include "heatmap/heatmap_gl_canvas.h"
#include "heatmap/heatmap_interaction.h"
#include "heatmap/heatmap_painter_canvas.h"

namespace moewb::gui {

bool HeatmapView::openGlUsable() {
  static const bool usable = [] {
    if (qEnvironmentVariableIntValue("MOEWB_NO_GL") != 0) return false;
    // These platforms have no GL; asking a QOpenGLWidget for a context there blocks grab() forever.
    const QString platform = QGuiApplication::platformName();
    if (platform == QLatin1String("offscreen") || platform == QLatin1String("minimal")) return false;
    QOpenGLContext ctx;
    if (!ctx.create()) return false;
    QOffscreenSurface surface;
    surface.setFormat(ctx.format());
    surface.create();
    if (!surface.isValid() || !ctx.makeCurrent(&surface)) return false;
    const auto [major, minor] = ctx.format().version();
    ctx.doneCurrent();
    Q_UNUSED(minor);
    return major >= 3;  // ImGui's OpenGL3 backend with "#version 130" shaders
  }();
  return usable;
}

HeatmapView::HeatmapView(QWidget* parent, Backend backend)
    : QWidget(parent), interaction_(new HeatmapInteraction(this)) {
  usesOpenGl_ = backend == Backend::OpenGl || (backend == Backend::Auto && openGlUsable());
  if (usesOpenGl_)
    canvas_ = new HeatmapGlCanvas(interaction_, this);
  else
    canvas_ = new HeatmapPainterCanvas(interaction_, this);
  canvas_->setObjectName(QStringLiteral("heatmapCanvas"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(canvas_);
  connect(interaction_, &HeatmapInteraction::cellClicked, this, &HeatmapView::cellClicked);
  connect(interaction_, &HeatmapInteraction::selectionChanged, this, &HeatmapView::selectionChanged);
  connect(interaction_, &HeatmapInteraction::contextMenuRequested, this, &HeatmapView::showContextMenu);
}

void HeatmapView::setData(HeatmapData data) {
  interaction_->setData(std::move(data));
  canvas_->update();
}

const HeatmapData& HeatmapView::data() const {
  return interaction_->data();
}

std::vector<QPoint> HeatmapView::selectedCells() const {
  return interaction_->selectedCells();
}

void HeatmapView::showContextMenu(QPoint globalPos) {
  const auto cells = interaction_->selectedCells();
  QMenu menu(this);
  QAction* setRank = nullptr;
  QAction* clearRank = nullptr;
  if (rankEditing_) {
    setRank = menu.addAction(tr("Set rank for %n selected cell(s)…", nullptr, int(cells.size())));
    clearRank = menu.addAction(tr("Clear rank overrides of the selection"));
    setRank->setEnabled(!cells.empty());
    clearRank->setEnabled(!cells.empty());
    menu.addSeparator();
  }
  QAction* fit = menu.addAction(tr("Fit to view"));
  QAction* exportImage = menu.addAction(tr("Export image (PNG or SVG)…"));
  exportImage->setEnabled(!data().empty());
  QAction* chosen = menu.exec(globalPos);
  if (!chosen) return;
  if (chosen == setRank) emit setRankRequested(cells);
  if (chosen == clearRank) emit clearRankRequested(cells);
  if (chosen == fit) interaction_->fitToView();
  if (chosen == exportImage) exportDialog();
}

void HeatmapView::exportDialog() {
  const QString path =
      QFileDialog::getSaveFileName(this, tr("Export heatmap"), exportName_ + QStringLiteral(".png"),
                                   tr("PNG images (*.png);;SVG images (*.svg)"));
  if (path.isEmpty()) return;
  QString error;
  if (!exportHeatmapImage(data(), path, canvas_->size().expandedTo(QSize(800, 400)), &error))
    QMessageBox::warning(this, tr("Export failed"), error);
}

}  // namespace moewb::gui

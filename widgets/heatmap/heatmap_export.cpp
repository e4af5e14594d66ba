// SPDX-License-Identifier: MIT
#include "heatmap/heatmap_export.h"

#include <QFileInfo>
#include <QImage>
#include <QPainter>
#include <QSaveFile>
#include <QSvgGenerator>

#include "heatmap/heatmap_interaction.h"
#include "heatmap/heatmap_painter_canvas.h"

namespace moewb::gui {

bool exportHeatmapImage(const HeatmapData& data, const QString& path, QSize size, QString* error) {
  const QString suffix = QFileInfo(path).suffix().toLower();
  if (suffix != QLatin1String("png") && suffix != QLatin1String("svg")) {
    if (error) *error = QObject::tr("%1: unknown image type '%2' (use .png or .svg)").arg(path, suffix);
    return false;
  }
  HeatmapInteraction interaction;
  HeatmapPainterCanvas canvas(&interaction);
  canvas.resize(size);
  interaction.setWidgetSize(size);
  interaction.setData(data);
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly)) {
    if (error) *error = QObject::tr("Could not write %1: %2").arg(path, file.errorString());
    return false;
  }
  bool written = true;
  if (suffix == QLatin1String("svg")) {
    QSvgGenerator svg;
    svg.setOutputDevice(&file);
    svg.setSize(size);
    svg.setViewBox(QRect(QPoint(0, 0), size));
    svg.setTitle(data.metric);
    svg.setDescription(QObject::tr("MoE Workbench heatmap"));
    QPainter p(&svg);
    canvas.render(&p);
  } else {
    // Twice the logical size, so report images stay sharp on high-density screens.
    QImage image(size * 2, QImage::Format_ARGB32_Premultiplied);
    image.setDevicePixelRatio(2.0);
    image.fill(canvas.palette().color(QPalette::Base));
    {
      QPainter p(&image);
      canvas.render(&p);
    }
    written = image.save(&file, "PNG");
  }
  if (!written || !file.commit()) {
    if (error) *error = QObject::tr("Could not write %1: %2").arg(path, file.errorString());
    return false;
  }
  return true;
}

}  // namespace moewb::gui

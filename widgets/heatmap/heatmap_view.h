// SPDX-License-Identifier: MIT
#pragma once
#include <QWidget>
#include <vector>

#include "heatmap/heatmap_data.h"

namespace moewb::gui {
class HeatmapInteraction;

// A layer × expert heatmap: the Dear ImGui/OpenGL canvas when an OpenGL 3 context can be created, the
// QPainter canvas otherwise (offscreen platform, no GLX, or MOEWB_NO_GL=1) — the view never hangs waiting
// for a context that cannot exist.
class HeatmapView : public QWidget {
  Q_OBJECT
 public:
  enum class Backend { Auto, OpenGl, Painter };
  explicit HeatmapView(QWidget* parent = nullptr, Backend backend = Backend::Auto);

  // True when this process can create an OpenGL ≥ 3.0 context (checked once, cached).
  static bool openGlUsable();
  // Version of the linked Dear ImGui (About box).
  static QString imguiVersion();

  void setData(HeatmapData data);
  const HeatmapData& data() const;
  bool usesOpenGl() const { return usesOpenGl_; }
  HeatmapInteraction* interaction() const { return interaction_; }
  QWidget* canvas() const { return canvas_; }
  std::vector<QPoint> selectedCells() const;  // (x = column, y = row)
  // The rank actions of the context menu; off for maps whose cells are not tensors (frequencies,
  // attention).
  void setRankEditing(bool enabled) { rankEditing_ = enabled; }
  // Default file name (without suffix) offered by the context menu's image export.
  void setExportName(const QString& name) { exportName_ = name; }

 public slots:
  // Asks for a file and writes the map as PNG or SVG (heatmap_export.h).
  void exportDialog();

 signals:
  void cellClicked(int row, int column);
  void selectionChanged();
  // The user asked to assign a rank to the selected cells (context menu); the owner validates and
  // applies it through its undo stack.
  void setRankRequested(std::vector<QPoint> cells);
  void clearRankRequested(std::vector<QPoint> cells);

 private:
  void showContextMenu(QPoint globalPos);
  HeatmapInteraction* interaction_;
  QWidget* canvas_ = nullptr;
  bool usesOpenGl_ = false;
  bool rankEditing_ = true;
  QString exportName_ = QStringLiteral("heatmap");
};

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#pragma once
#include <QWidget>
#include <memory>

#include "models/attention_map_model.h"

class QComboBox;
class QCheckBox;

namespace moewb::gui {
class HeatmapView;
class XyPlot;

// The attention mass on the first tokens per layer (the mean over heads, and each head when they fit a
// legend) against uniform attention: what the page's side plot and the report draw.
void showFirstTokenMass(XyPlot& plot, const AttentionMapModel& model);

// Attention maps of a KV capture: one head (query × key) or every head of a layer in a grid, drawn by
// the heatmap canvas (Dear ImGui/OpenGL, QPainter without GL), hover giving head, query, key and the
// probability; beside it the attention mass on the first tokens per layer against what uniform
// attention would give, the attention-sink pattern that motivates MoQAE's routing freezing.
class AttentionPage : public QWidget {
  Q_OBJECT
 public:
  explicit AttentionPage(QWidget* parent = nullptr);
  void setCapture(std::shared_ptr<const engine::KvCapture> capture);
  const AttentionMapModel& model() const { return model_; }
  // Head index, or AttentionMapModel::kAllHeads for the grid.
  void select(int layer, int head);
  int layer() const;
  int head() const;
  HeatmapView* view() const { return view_; }
  XyPlot* sinkPlot() const { return sinkPlot_; }

 private:
  void refreshMap();
  void refreshSinkPlot();
  AttentionMapModel model_;
  QComboBox* layer_;
  QComboBox* head_;
  QCheckBox* logColour_;
  HeatmapView* view_;
  XyPlot* sinkPlot_;
};

}  // namespace moewb::gui

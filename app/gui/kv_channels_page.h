// SPDX-License-Identifier: MIT
#pragma once
#include <QStringList>
#include <QWidget>
#include <memory>

#include "moewb/engine/kv_capture.h"

class QComboBox;
class QCheckBox;
class QDoubleSpinBox;
class QLabel;

namespace moewb::gui {
class ChannelMagnitudePlot;

// Fills the K and V channel plots of `layer` and `kvHead` (or engine::kAllKvHeads) with core's channel
// magnitudes and outlier channels (kv_stats.h), titled with the layer and head; returns one summary line
// per tensor ("K (after RoPE): 2 outlier channel(s) (3, 17)"). The page and the report draw with it.
QStringList showChannelMagnitudes(ChannelMagnitudePlot& keys, ChannelMagnitudePlot& values,
                                  const engine::KvCapture& capture, int layer, int kvHead,
                                  double outlierFactor, bool logY);

// K and V channel plots of a KV capture: max |x| and mean |x| per channel for a layer and KV head (or all
// KV heads of the layer), outlier channels (max |x| above a multiple of the median channel's) marked. The
// numbers and the outlier definition are core's (moewb/engine/kv_stats.h, also used by `moewb kv`).
class KvChannelsPage : public QWidget {
  Q_OBJECT
 public:
  explicit KvChannelsPage(QWidget* parent = nullptr);
  void setCapture(std::shared_ptr<const engine::KvCapture> capture);
  // kvHead: a KV head index or engine::kAllKvHeads (moewb/engine/kv_stats.h).
  void select(int layer, int kvHead);
  void setOutlierFactor(double factor);
  ChannelMagnitudePlot* keyPlot() const { return keys_; }
  ChannelMagnitudePlot* valuePlot() const { return values_; }
  QString summary() const;

 private:
  void refresh();
  std::shared_ptr<const engine::KvCapture> capture_;
  QComboBox* layer_;
  QComboBox* kvHead_;
  QDoubleSpinBox* factor_;
  QCheckBox* logY_;
  QLabel* summary_;
  ChannelMagnitudePlot* keys_;
  ChannelMagnitudePlot* values_;
};

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#pragma once
#include <QString>
#include <vector>

#include "charts/plot_view.h"

namespace moewb::gui {

// Per-channel magnitudes of a K or V cache: max |x| and mean |x| per channel as two curves, the outlier
// threshold as a dashed line and the outlier channels as red markers, so fixed outlier channels (the
// reason keys are quantized per channel) are seen at a glance.
class ChannelMagnitudePlot : public PlotView {
  Q_OBJECT
 public:
  explicit ChannelMagnitudePlot(QString exportName, QWidget* parent = nullptr);
  void setChannels(std::vector<double> maxAbs, std::vector<double> meanAbs, std::vector<int> outliers,
                   double threshold, bool logY);
  void clear();
  const std::vector<int>& outliers() const { return outliers_; }
  int channelCount() const { return int(maxAbs_.size()); }

 protected:
  QString exportBaseName() const override { return exportName_; }

 private:
  void rebuild();
  QString exportName_;
  std::vector<double> maxAbs_, meanAbs_;
  std::vector<int> outliers_;
  double threshold_ = 0;
  bool logY_ = false;
};

}  // namespace moewb::gui

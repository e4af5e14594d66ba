// SPDX-License-Identifier: MIT
#include "charts/channel_magnitude_plot.h"

#include <QLineSeries>
#include <QLogValueAxis>
#include <QScatterSeries>
#include <QValueAxis>
#include <algorithm>
#include <cmath>

namespace moewb::gui {

ChannelMagnitudePlot::ChannelMagnitudePlot(QString exportName, QWidget* parent)
    : PlotView(parent), exportName_(std::move(exportName)) {}

void ChannelMagnitudePlot::setChannels(std::vector<double> maxAbs, std::vector<double> meanAbs,
                                       std::vector<int> outliers, double threshold, bool logY) {
  maxAbs_ = std::move(maxAbs);
  meanAbs_ = std::move(meanAbs);
  outliers_ = std::move(outliers);
  threshold_ = threshold;
  logY_ = logY;
  rebuild();
}

void ChannelMagnitudePlot::clear() {
  maxAbs_.clear();
  meanAbs_.clear();
  outliers_.clear();
  rebuild();
}

void ChannelMagnitudePlot::rebuild() {
  QChart* c = chart();
  c->removeAllSeries();
  for (QAbstractAxis* a : c->axes()) {
    c->removeAxis(a);
    delete a;
  }
  if (maxAbs_.empty()) return;
  double lo = 1e300, hi = 0;
  auto* maxSeries = new QLineSeries;
  maxSeries->setName(tr("max |x|"));
  auto* meanSeries = new QLineSeries;
  meanSeries->setName(tr("mean |x|"));
  for (std::size_t i = 0; i < maxAbs_.size(); ++i) {
    const double m = maxAbs_[i], a = i < meanAbs_.size() ? meanAbs_[i] : 0.0;
    // A log axis cannot show zeros (a channel that is exactly zero): leave such points out.
    if (!logY_ || m > 0) maxSeries->append(double(i), m);
    if (!logY_ || a > 0) meanSeries->append(double(i), a);
    hi = std::max(hi, m);
    if (m > 0) lo = std::min(lo, m);
    if (a > 0) lo = std::min(lo, a);
  }
  auto* outlierSeries = new QScatterSeries;
  outlierSeries->setName(tr("%n outlier channel(s)", nullptr, int(outliers_.size())));
  outlierSeries->setColor(QColor(220, 50, 50));
  outlierSeries->setBorderColor(QColor(220, 50, 50));
  outlierSeries->setMarkerSize(9);
  for (int ch : outliers_)
    if (ch >= 0 && std::size_t(ch) < maxAbs_.size())
      outlierSeries->append(double(ch), maxAbs_[std::size_t(ch)]);
  auto* thresholdSeries = new QLineSeries;
  thresholdSeries->setName(tr("threshold %1").arg(threshold_, 0, 'g', 3));
  if (std::isfinite(threshold_) && (!logY_ || threshold_ > 0)) {
    thresholdSeries->append(0, threshold_);
    thresholdSeries->append(double(maxAbs_.size() - 1), threshold_);
    hi = std::max(hi, threshold_);
  }
  QPen dashed(QColor(220, 50, 50));
  dashed.setStyle(Qt::DashLine);
  dashed.setWidthF(1.2);
  thresholdSeries->setPen(dashed);

  auto* x = new QValueAxis;
  x->setTitleText(tr("channel"));
  x->setRange(0, std::max(1.0, double(maxAbs_.size() - 1)));
  x->setLabelFormat(QStringLiteral("%d"));
  QAbstractAxis* y;
  if (logY_) {
    auto* ly = new QLogValueAxis;
    ly->setBase(10);
    ly->setRange(lo < hi ? lo / 1.5 : 1e-6, hi > 0 ? hi * 1.5 : 1.0);
    ly->setLabelFormat(QStringLiteral("%.2g"));
    y = ly;
  } else {
    auto* vy = new QValueAxis;
    vy->setRange(0, hi > 0 ? hi * 1.08 : 1.0);
    vy->setLabelFormat(QStringLiteral("%.3g"));
    y = vy;
  }
  y->setTitleText(tr("|x|"));
  c->addAxis(x, Qt::AlignBottom);
  c->addAxis(y, Qt::AlignLeft);
  for (QXYSeries* s :
       std::initializer_list<QXYSeries*>{maxSeries, meanSeries, thresholdSeries, outlierSeries}) {
    c->addSeries(s);
    s->attachAxis(x);
    s->attachAxis(y);
  }
}

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#include "charts/xy_plot.h"

#include <QLineSeries>
#include <QLogValueAxis>
#include <QValueAxis>
#include <algorithm>
#include <cmath>

namespace moewb::gui {

XyPlot::XyPlot(QString exportName, QWidget* parent) : PlotView(parent), exportName_(std::move(exportName)) {}

void XyPlot::setCurves(std::vector<Curve> curves, const QString& xTitle, const QString& yTitle, bool logY) {
  curves_ = std::move(curves);
  xTitle_ = xTitle;
  yTitle_ = yTitle;
  logY_ = logY;
  rebuild();
}

void XyPlot::setHorizontalLine(std::optional<double> y, const QString& label) {
  hLine_ = y;
  hLabel_ = label;
  rebuild();
}

void XyPlot::setVerticalLine(std::optional<double> x, const QString& label) {
  vLine_ = x;
  vLabel_ = label;
  rebuild();
}

void XyPlot::clear() {
  curves_.clear();
  hLine_.reset();
  vLine_.reset();
  rebuild();
}

void XyPlot::rebuild() {
  QChart* c = chart();
  c->removeAllSeries();
  for (QAbstractAxis* a : c->axes()) {
    c->removeAxis(a);
    delete a;
  }
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  auto include = [&](double x, double y) {
    if (!std::isfinite(x) || !std::isfinite(y) || (logY_ && y <= 0)) return false;
    x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    return true;
  };
  std::vector<QLineSeries*> series;
  for (const Curve& curve : curves_) {
    auto* s = new QLineSeries;
    s->setName(curve.name);
    for (std::size_t i = 0; i < std::min(curve.x.size(), curve.y.size()); ++i)
      if (include(curve.x[i], curve.y[i])) s->append(curve.x[i], curve.y[i]);
    series.push_back(s);
  }
  if (x0 > x1) {
    for (auto* s : series) delete s;
    return;
  }
  if (hLine_) include(x0, *hLine_);
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 * 1.1 + 1e-12;
  auto addLine = [&](QPointF a, QPointF b, const QString& name, const QColor& colour) {
    auto* s = new QLineSeries;
    s->setName(name);
    s->append(a);
    s->append(b);
    QPen pen(colour);
    pen.setStyle(Qt::DashLine);
    pen.setWidthF(1.5);
    s->setPen(pen);
    series.push_back(s);
  };
  if (hLine_ && (!logY_ || *hLine_ > 0)) addLine({x0, *hLine_}, {x1, *hLine_}, hLabel_, QColor(220, 60, 60));
  if (vLine_) addLine({*vLine_, y0}, {*vLine_, y1}, vLabel_, QColor(60, 140, 220));

  auto* x = new QValueAxis;
  x->setTitleText(xTitle_);
  x->setRange(x0, x1);
  x->setLabelFormat(QStringLiteral("%g"));
  // A short run of whole numbers (layers, a few ranks) gets one tick per value: "0.75 layers" means nothing.
  bool wholeNumbers = x1 - x0 <= 24;
  for (const Curve& curve : curves_)
    for (double v : curve.x) wholeNumbers = wholeNumbers && std::isfinite(v) && v == std::round(v);
  if (wholeNumbers) {
    x->setTickCount(int(x1 - x0) + 1);
    x->setLabelFormat(QStringLiteral("%d"));
  }
  QAbstractAxis* y;
  if (logY_) {
    auto* ly = new QLogValueAxis;
    ly->setBase(10);
    ly->setRange(y0 / 1.5, y1 * 1.5);
    ly->setLabelFormat(QStringLiteral("%.2g"));
    y = ly;
  } else {
    auto* vy = new QValueAxis;
    const double pad = (y1 - y0) * 0.05;
    vy->setRange(std::max(0.0, y0 - pad), y1 + pad);
    vy->setLabelFormat(QStringLiteral("%.3g"));
    y = vy;
  }
  y->setTitleText(yTitle_);
  c->addAxis(x, Qt::AlignBottom);
  c->addAxis(y, Qt::AlignLeft);
  for (QLineSeries* s : series) {
    c->addSeries(s);
    s->attachAxis(x);
    s->attachAxis(y);
  }
}

void showResidualSpectrum(XyPlot& plot, const std::vector<double>& singularValues, std::optional<double> tau,
                          std::optional<int> residualRank) {
  plot.setTitle(QObject::tr("Residual spectrum"));
  XyPlot::Curve curve{QObject::tr("σᵢ of W − Q(W)"), {}, {}};
  for (std::size_t i = 0; i < singularValues.size(); ++i) {
    curve.x.push_back(double(i + 1));
    curve.y.push_back(singularValues[i]);
  }
  plot.setCurves({curve}, QObject::tr("index i"), QObject::tr("σᵢ (log)"), true);
  plot.setHorizontalLine(tau, QObject::tr("τ = %1").arg(tau.value_or(0), 0, 'g', 3));
  plot.setVerticalLine(residualRank ? std::optional<double>(*residualRank) : std::nullopt,
                       QObject::tr("residual rank %1").arg(residualRank.value_or(0)));
}

void showErrorVsRank(XyPlot& plot, const std::vector<int>& ranks, const std::vector<double>& errors,
                     std::optional<int> chosenRank) {
  plot.setTitle(QObject::tr("Error vs compensator rank"));
  XyPlot::Curve curve{QObject::tr("relative error"), {}, errors};
  for (int r : ranks) curve.x.push_back(r);
  plot.setCurves({curve}, QObject::tr("rank r"), QObject::tr("‖W−Ŵ‖/‖W‖"), false);
  plot.setVerticalLine(chosenRank ? std::optional<double>(*chosenRank) : std::nullopt,
                       QObject::tr("assigned rank %1").arg(chosenRank.value_or(0)));
}

}  // namespace moewb::gui

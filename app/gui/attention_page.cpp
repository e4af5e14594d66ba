// SPDX-License-Identifier: MIT
#include "attention_page.h"

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSplitter>
#include <QVBoxLayout>

#include "charts/xy_plot.h"
#include "heatmap/heatmap_view.h"

namespace moewb::gui {

AttentionPage::AttentionPage(QWidget* parent)
    : QWidget(parent),
      layer_(new QComboBox(this)),
      head_(new QComboBox(this)),
      logColour_(new QCheckBox(tr("log colour"), this)),
      view_(new HeatmapView(this)),
      sinkPlot_(new XyPlot(QStringLiteral("attention-first-tokens"), this)) {
  for (QComboBox* box : {layer_, head_}) box->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  view_->setRankEditing(false);
  view_->setExportName(QStringLiteral("attention"));
  logColour_->setToolTip(tr("Colour by log10(p): shows the small probabilities next to the attention sinks"));
  auto* exportImage = new QPushButton(tr("Export image…"), this);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Layer:"), this));
  bar->addWidget(layer_);
  bar->addWidget(new QLabel(tr("Head:"), this));
  bar->addWidget(head_);
  bar->addWidget(logColour_);
  bar->addWidget(exportImage);
  bar->addStretch();
  auto* hint =
      new QLabel(tr("rows: queries · columns: keys · hover for the probability · wheel: zoom"), this);
  hint->setEnabled(false);
  bar->addWidget(hint);
  auto* split = new QSplitter(this);
  split->addWidget(view_);
  split->addWidget(sinkPlot_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 1);
  sinkPlot_->setMinimumWidth(400);  // room for the legend of every head
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(bar);
  layout->addWidget(split, 1);
  sinkPlot_->setTitle(tr("Attention on the first tokens"));

  connect(layer_, &QComboBox::currentIndexChanged, this, &AttentionPage::refreshMap);
  connect(head_, &QComboBox::currentIndexChanged, this, &AttentionPage::refreshMap);
  connect(logColour_, &QCheckBox::toggled, this, &AttentionPage::refreshMap);
  connect(exportImage, &QPushButton::clicked, view_, &HeatmapView::exportDialog);
}

void AttentionPage::setCapture(std::shared_ptr<const engine::KvCapture> capture) {
  const int oldLayer = layer(), oldHead = head();
  model_.setCapture(std::move(capture));
  {
    // One refresh after both selectors are filled, not one per inserted item.
    const QSignalBlocker blockLayer(layer_), blockHead(head_);
    layer_->clear();
    head_->clear();
    for (int l = 0; l < model_.layers(); ++l) layer_->addItem(tr("layer %1").arg(l), l);
    head_->addItem(tr("all heads"), AttentionMapModel::kAllHeads);
    for (int h = 0; h < model_.heads(); ++h) head_->addItem(tr("head %1").arg(h), h);
    // Keep the user's choice when the new capture has it (a longer prompt of the same model).
    layer_->setCurrentIndex(std::max(0, layer_->findData(oldLayer)));
    head_->setCurrentIndex(std::max(0, head_->findData(oldHead)));
  }
  refreshMap();
  refreshSinkPlot();
}

void AttentionPage::select(int layer, int head) {
  {
    const QSignalBlocker blockLayer(layer_), blockHead(head_);
    layer_->setCurrentIndex(layer_->findData(layer));
    head_->setCurrentIndex(head_->findData(head));
  }
  refreshMap();
}

int AttentionPage::layer() const {
  return layer_->currentIndex() < 0 ? 0 : layer_->currentData().toInt();
}
int AttentionPage::head() const {
  return head_->currentIndex() < 0 ? 0 : head_->currentData().toInt();
}

void AttentionPage::refreshMap() {
  view_->setData(model_.heatmap(layer(), head(), logColour_->isChecked()));
}

void AttentionPage::refreshSinkPlot() {
  showFirstTokenMass(*sinkPlot_, model_);
}

void showFirstTokenMass(XyPlot& plot, const AttentionMapModel& model) {
  plot.clear();
  if (model.empty()) return;
  const engine::KvCapture& c = *model.capture();
  std::vector<XyPlot::Curve> curves;
  XyPlot::Curve mean{AttentionPage::tr("mean"), {}, {}};
  const std::vector<double> perLayer = c.sinkMassPerLayer();
  for (int l = 0; l < c.layers; ++l) {
    mean.x.push_back(l);
    mean.y.push_back(perLayer[std::size_t(l)]);
  }
  curves.push_back(mean);
  // Every head when they fit in a legend; beyond that the mean says it.
  if (c.heads <= 8)
    for (int h = 0; h < c.heads; ++h) {
      XyPlot::Curve curve{AttentionPage::tr("h%1").arg(h), {}, {}};
      for (int l = 0; l < c.layers; ++l) {
        curve.x.push_back(l);
        curve.y.push_back(model.firstTokenMass(l, h));
      }
      curves.push_back(curve);
    }
  plot.setCurves(curves, AttentionPage::tr("layer"),
                 AttentionPage::tr("attention mass on the first %n token(s)", nullptr, c.first_tokens),
                 false);
  plot.setHorizontalLine(model.uniformFirstTokenMass(), AttentionPage::tr("uniform"));
}

}  // namespace moewb::gui

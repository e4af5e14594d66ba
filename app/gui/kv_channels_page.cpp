// SPDX-License-Identifier: MIT
#include "kv_channels_page.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QSplitter>
#include <QVBoxLayout>

#include "charts/channel_magnitude_plot.h"
#include "moewb/engine/kv_stats.h"

namespace moewb::gui {

KvChannelsPage::KvChannelsPage(QWidget* parent)
    : QWidget(parent),
      layer_(new QComboBox(this)),
      kvHead_(new QComboBox(this)),
      factor_(new QDoubleSpinBox(this)),
      logY_(new QCheckBox(tr("log scale"), this)),
      summary_(new QLabel(this)),
      keys_(new ChannelMagnitudePlot(QStringLiteral("key-channels"), this)),
      values_(new ChannelMagnitudePlot(QStringLiteral("value-channels"), this)) {
  for (QComboBox* box : {layer_, kvHead_}) box->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  factor_->setRange(1.0, 100.0);
  factor_->setSingleStep(0.5);
  factor_->setValue(engine::kDefaultOutlierFactor);
  factor_->setPrefix(tr("outlier: max |x| > "));
  factor_->setSuffix(tr(" × median channel"));
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Layer:"), this));
  bar->addWidget(layer_);
  bar->addWidget(new QLabel(tr("KV head:"), this));
  bar->addWidget(kvHead_);
  bar->addWidget(factor_);
  bar->addWidget(logY_);
  bar->addStretch();
  auto* hint = new QLabel(tr("right-click a plot: export PNG / SVG"), this);
  hint->setEnabled(false);
  bar->addWidget(hint);
  auto* split = new QSplitter(this);
  split->addWidget(keys_);
  split->addWidget(values_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(bar);
  layout->addWidget(summary_);
  layout->addWidget(split, 1);
  for (QComboBox* box : {layer_, kvHead_})
    connect(box, &QComboBox::currentIndexChanged, this, &KvChannelsPage::refresh);
  connect(factor_, &QDoubleSpinBox::valueChanged, this, &KvChannelsPage::refresh);
  connect(logY_, &QCheckBox::toggled, this, &KvChannelsPage::refresh);
}

void KvChannelsPage::setCapture(std::shared_ptr<const engine::KvCapture> capture) {
  capture_ = std::move(capture);
  {
    const QSignalBlocker blockLayer(layer_), blockHead(kvHead_);
    const int oldLayer = layer_->currentData().toInt(), oldHead = kvHead_->currentData().toInt();
    layer_->clear();
    kvHead_->clear();
    if (capture_) {
      for (int l = 0; l < capture_->layers; ++l) layer_->addItem(tr("layer %1").arg(l), l);
      kvHead_->addItem(tr("all KV heads"), engine::kAllKvHeads);
      for (int h = 0; h < capture_->kv_heads; ++h) kvHead_->addItem(tr("KV head %1").arg(h), h);
      layer_->setCurrentIndex(std::max(0, layer_->findData(oldLayer)));
      kvHead_->setCurrentIndex(std::max(0, kvHead_->findData(oldHead)));
    }
  }
  refresh();
}

void KvChannelsPage::select(int layer, int kvHead) {
  {
    const QSignalBlocker blockLayer(layer_), blockHead(kvHead_);
    layer_->setCurrentIndex(layer_->findData(layer));
    kvHead_->setCurrentIndex(kvHead_->findData(kvHead));
  }
  refresh();
}

void KvChannelsPage::setOutlierFactor(double factor) {
  factor_->setValue(factor);
}

QString KvChannelsPage::summary() const {
  return summary_->text();
}

void KvChannelsPage::refresh() {
  if (!capture_ || layer_->currentIndex() < 0) {
    keys_->clear();
    values_->clear();
    summary_->setText(tr("No K/V capture yet."));
    return;
  }
  const QStringList lines =
      showChannelMagnitudes(*keys_, *values_, *capture_, layer_->currentData().toInt(),
                            kvHead_->currentData().toInt(), factor_->value(), logY_->isChecked());
  summary_->setText(tr("%1 positions. ").arg(capture_->length) + lines.join(QStringLiteral(" · ")));
}

QStringList showChannelMagnitudes(ChannelMagnitudePlot& keysPlot, ChannelMagnitudePlot& valuesPlot,
                                  const engine::KvCapture& capture, int layer, int head, double outlierFactor,
                                  bool logY) {
  const QString where = head == engine::kAllKvHeads
                            ? KvChannelsPage::tr("layer %1, all %2 KV heads (channel = head × %3 + d)")
                                  .arg(layer)
                                  .arg(capture.kv_heads)
                                  .arg(capture.key_dim)
                            : KvChannelsPage::tr("layer %1, KV head %2").arg(layer).arg(head);
  QStringList lines;
  for (engine::KvTensor t : {engine::KvTensor::Keys, engine::KvTensor::Values}) {
    const bool keys = t == engine::KvTensor::Keys;
    // Statistics and the outlier definition are core's (what `moewb kv` prints); this only shows them.
    engine::ChannelMagnitudes m = engine::channelMagnitudes(capture, t, layer, head);
    engine::OutlierChannels found = engine::outlierChannels(m.max_abs, outlierFactor);
    std::vector<int> outliers = std::move(found.channels);
    const double threshold = found.threshold;
    QStringList channels;
    for (std::size_t i = 0; i < outliers.size() && i < 12; ++i) channels << QString::number(outliers[i]);
    if (outliers.size() > 12) channels << QStringLiteral("…");
    lines << KvChannelsPage::tr("%1: %n outlier channel(s)%2", nullptr, int(outliers.size()))
                 .arg(keys ? KvChannelsPage::tr("K (after RoPE)") : KvChannelsPage::tr("V"),
                      outliers.empty()
                          ? QString()
                          : QStringLiteral(" (") + channels.join(QStringLiteral(", ")) + QLatin1Char(')'));
    ChannelMagnitudePlot& plot = keys ? keysPlot : valuesPlot;
    plot.setTitle((keys ? KvChannelsPage::tr("Keys — %1") : KvChannelsPage::tr("Values — %1")).arg(where));
    plot.setChannels(std::move(m.max_abs), std::move(m.mean_abs), std::move(outliers), threshold, logY);
  }
  return lines;
}

}  // namespace moewb::gui

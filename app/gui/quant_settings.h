// SPDX-License-Identifier: MIT
#pragma once
#include <QJsonObject>
#include <QMap>
#include <QString>

#include "moewb/quant/batch_backend.h"
#include "moewb/quant/model_quantizer.h"

namespace moewb::gui {

// What the user chose in the Jobs panel: a method of the registry (moewb/methods/registry.h), its
// options by name as text (the words of `moewb quantize`'s flags) and the device.
struct QuantSettings {
  QString method = QStringLiteral("milo");
  QMap<QString, QString> options;  // absent: the method's default
  // Where it runs: auto (the GPU when there is one), cpu, cuda; `moewb quantize --device`. The session
  // passes computeDevice() to quantizeModel's backend choice; a project file without it means auto.
  QString device = QStringLiteral("auto");
  quant::ComputeDevice computeDevice() const;  // auto for a word it does not know
  // The option's value, or the method's default for it ("" when the method has no such option).
  QString option(const QString& name) const;
  // "MILO bits=3 group=64 max-iters=20 ...": job titles, the summary, the perplexity table.
  QString describe() const;
  QJsonObject toJson() const;
  // Reads this format and the older one with fixed fields (bits, group, max_iterations, compensator).
  static QuantSettings fromJson(const QJsonObject& o);
};

// The core settings for a run; throws moewb::Error for an unknown method or an invalid option value.
quant::QuantizeSettings toCoreSettings(const QuantSettings& settings);

}  // namespace moewb::gui

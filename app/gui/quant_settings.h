// SPDX-License-Identifier: MIT
#pragma once
#include <QJsonObject>
#include <QString>

#include "moewb/quant/batch_backend.h"

namespace moewb::gui {

enum class QuantMethod { Rtn, Hqq, Milo };
QString quantMethodName(QuantMethod m);  // "rtn", "hqq", "milo"
bool parseQuantMethod(const QString& s, QuantMethod* out);

// What the user chose in the Jobs panel; the same words as `moewb quantize`'s options.
struct QuantSettings {
  QuantMethod method = QuantMethod::Milo;
  int bits = 3;
  int group = 64;
  int maxIterations = 20;                        // MiLo
  QString compensator = QStringLiteral("int3");  // MiLo: int3, int8, fp16, fp32
  // Where it runs: auto (the GPU when there is one), cpu, cuda; `moewb quantize --device`. The session
  // passes computeDevice() to quantizeModel's backend choice; a project file without it means auto.
  QString device = QStringLiteral("auto");
  quant::ComputeDevice computeDevice() const;  // auto for a word it does not know
  QJsonObject toJson() const;
  static QuantSettings fromJson(const QJsonObject& o);
};

}  // namespace moewb::gui

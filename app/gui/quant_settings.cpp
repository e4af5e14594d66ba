// SPDX-License-Identifier: MIT
#include "quant_settings.h"

namespace moewb::gui {

QString quantMethodName(QuantMethod m) {
  switch (m) {
    case QuantMethod::Rtn:
      return QStringLiteral("rtn");
    case QuantMethod::Hqq:
      return QStringLiteral("hqq");
    case QuantMethod::Milo:
      return QStringLiteral("milo");
  }
  return {};
}

bool parseQuantMethod(const QString& s, QuantMethod* out) {
  for (QuantMethod m : {QuantMethod::Rtn, QuantMethod::Hqq, QuantMethod::Milo})
    if (s.compare(quantMethodName(m), Qt::CaseInsensitive) == 0) {
      *out = m;
      return true;
    }
  return false;
}

QJsonObject QuantSettings::toJson() const {
  return {{"method", quantMethodName(method)},
          {"bits", bits},
          {"group", group},
          {"max_iterations", maxIterations},
          {"compensator", compensator},
          {"device", device}};
}

quant::ComputeDevice QuantSettings::computeDevice() const {
  return quant::parseComputeDevice(device.toLower().toStdString()).value_or(quant::ComputeDevice::Auto);
}

QuantSettings QuantSettings::fromJson(const QJsonObject& o) {
  QuantSettings s;
  parseQuantMethod(o.value("method").toString(quantMethodName(s.method)), &s.method);
  s.bits = o.value("bits").toInt(s.bits);
  s.group = o.value("group").toInt(s.group);
  s.maxIterations = o.value("max_iterations").toInt(s.maxIterations);
  s.compensator = o.value("compensator").toString(s.compensator);
  s.device = o.value("device").toString(s.device);
  return s;
}

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#include "quant_settings.h"

#include <fmt/format.h>

#include "moewb/methods/registry.h"

namespace moewb::gui {

quant::ComputeDevice QuantSettings::computeDevice() const {
  return quant::parseComputeDevice(device.toLower().toStdString()).value_or(quant::ComputeDevice::Auto);
}

QString QuantSettings::option(const QString& name) const {
  if (options.contains(name)) return options.value(name);
  const methods::WeightMethod* m = methods::MethodRegistry::instance().find(method.toStdString());
  const methods::OptionSpec* spec = m ? m->option(name.toStdString()) : nullptr;
  return spec ? QString::fromStdString(spec->default_value) : QString();
}

QString QuantSettings::describe() const {
  QString text = method.toUpper();
  if (const methods::WeightMethod* m = methods::MethodRegistry::instance().find(method.toStdString()))
    for (const methods::OptionSpec& spec : m->options()) {
      const QString name = QString::fromStdString(spec.name);
      text += QStringLiteral(" %1=%2").arg(name, option(name));
    }
  return text;
}

QJsonObject QuantSettings::toJson() const {
  QJsonObject o;
  for (auto it = options.begin(); it != options.end(); ++it) o.insert(it.key(), it.value());
  return {{"method", method}, {"options", o}, {"device", device}};
}

QuantSettings QuantSettings::fromJson(const QJsonObject& o) {
  QuantSettings s;
  s.method = o.value("method").toString(s.method).toLower();
  const QJsonObject options = o.value("options").toObject();
  for (auto it = options.begin(); it != options.end(); ++it) s.options.insert(it.key(), it.value().toString());
  // Project files written before methods were registry entries kept four fixed fields.
  const std::pair<const char*, const char*> legacy[] = {
      {"bits", "bits"}, {"group", "group"}, {"max_iterations", "max-iters"}, {"compensator", "compensator"}};
  for (const auto& [key, option] : legacy)
    if (o.contains(key) && !s.options.contains(option))
      s.options.insert(option, o.value(key).isString() ? o.value(key).toString()
                                                      : QString::number(o.value(key).toInt()));
  s.device = o.value("device").toString(s.device);
  return s;
}

quant::QuantizeSettings toCoreSettings(const QuantSettings& settings) {
  const methods::WeightMethod& method = methods::weightMethod(settings.method.toStdString(), "quantization");
  quant::QuantizeSettings core = method.defaults();
  for (auto it = settings.options.begin(); it != settings.options.end(); ++it) {
    // Options another method takes (kept from an earlier choice in the panel) do not apply here.
    const methods::OptionSpec* spec = method.option(it.key().toStdString());
    if (spec) methods::setOption(*spec, core, it.value().toStdString(), fmt::format("{}", spec->label));
  }
  method.validate(core);
  return core;
}

}  // namespace moewb::gui

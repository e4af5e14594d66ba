// SPDX-License-Identifier: MIT
#include "method_options_form.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLineEdit>
#include <QSpinBox>
#include <algorithm>
#include <climits>
#include <cmath>

#include "moewb/methods/registry.h"

namespace moewb::gui {

namespace {

int clampToInt(double v) {
  return std::isinf(v) ? (v > 0 ? INT_MAX : INT_MIN) : int(std::clamp(v, double(INT_MIN), double(INT_MAX)));
}

}  // namespace

MethodOptionsForm::MethodOptionsForm(QWidget* parent) : QWidget(parent), form_(new QFormLayout(this)) {
  form_->setContentsMargins(0, 0, 0, 0);
  for (const methods::WeightMethod* m : methods::MethodRegistry::instance().all())
    for (const methods::OptionSpec& spec : m->options()) {
      const QString name = QString::fromStdString(spec.name);
      if (editors_.contains(name)) continue;
      QWidget* editor = nullptr;
      if (!spec.choices.empty()) {
        auto* box = new QComboBox(this);
        for (const std::string& c : spec.choices) box->addItem(QString::fromStdString(c));
        connect(box, &QComboBox::currentIndexChanged, this, &MethodOptionsForm::valuesChanged);
        editor = box;
      } else if (spec.type == methods::OptionType::Integer) {
        auto* box = new QSpinBox(this);
        box->setRange(clampToInt(spec.min), clampToInt(spec.max));
        connect(box, &QSpinBox::valueChanged, this, &MethodOptionsForm::valuesChanged);
        editor = box;
      } else if (spec.type == methods::OptionType::Real) {
        auto* box = new QDoubleSpinBox(this);
        box->setDecimals(6);
        box->setRange(std::isinf(spec.min) ? -1e300 : spec.min, std::isinf(spec.max) ? 1e300 : spec.max);
        connect(box, &QDoubleSpinBox::valueChanged, this, &MethodOptionsForm::valuesChanged);
        editor = box;
      } else {
        auto* line = new QLineEdit(this);
        connect(line, &QLineEdit::textChanged, this, &MethodOptionsForm::valuesChanged);
        editor = line;
      }
      editor->setObjectName(QStringLiteral("option-") + name);
      editor->setToolTip(QString::fromStdString(spec.help + " (" + methods::expectedText(spec) + ")"));
      editors_.insert(name, editor);
      form_->addRow(QString::fromStdString(spec.label), editor);
      setValueOf(name, QString::fromStdString(spec.default_value));
    }
  const auto all = methods::MethodRegistry::instance().all();
  if (!all.empty()) setMethod(QString::fromStdString(std::string(all.front()->name())));
}

void MethodOptionsForm::setMethod(const QString& method) {
  method_ = method;
  const methods::WeightMethod* m = methods::MethodRegistry::instance().find(method.toStdString());
  for (auto it = editors_.begin(); it != editors_.end(); ++it)
    form_->setRowVisible(it.value(), m && m->option(it.key().toStdString()));
}

QMap<QString, QString> MethodOptionsForm::values() const {
  QMap<QString, QString> out;
  const methods::WeightMethod* m = methods::MethodRegistry::instance().find(method_.toStdString());
  if (!m) return out;
  for (const methods::OptionSpec& spec : m->options()) {
    const QString name = QString::fromStdString(spec.name);
    out.insert(name, valueOf(name));
  }
  return out;
}

void MethodOptionsForm::setValues(const QMap<QString, QString>& values) {
  for (auto it = values.begin(); it != values.end(); ++it) setValueOf(it.key(), it.value());
}

QString MethodOptionsForm::valueOf(const QString& option) const {
  QWidget* w = editors_.value(option);
  if (auto* box = qobject_cast<QComboBox*>(w)) return box->currentText();
  if (auto* spin = qobject_cast<QSpinBox*>(w)) return QString::number(spin->value());
  if (auto* real = qobject_cast<QDoubleSpinBox*>(w)) return QString::number(real->value(), 'g', 17);
  if (auto* line = qobject_cast<QLineEdit*>(w)) return line->text();
  return {};
}

void MethodOptionsForm::setValueOf(const QString& option, const QString& value) {
  QWidget* w = editors_.value(option);
  if (auto* box = qobject_cast<QComboBox*>(w)) {
    const int i = box->findText(value);
    if (i >= 0) box->setCurrentIndex(i);
  } else if (auto* spin = qobject_cast<QSpinBox*>(w)) {
    spin->setValue(value.toInt());
  } else if (auto* real = qobject_cast<QDoubleSpinBox*>(w)) {
    real->setValue(value.toDouble());
  } else if (auto* line = qobject_cast<QLineEdit*>(w)) {
    line->setText(value);
  }
}

}  // namespace moewb::gui

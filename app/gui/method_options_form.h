// SPDX-License-Identifier: MIT
#pragma once
// The form of a compression method's options, made from the method registry's option descriptions:
// one editor per option name (a spin box for integers, a combo box for choices, a line edit for text),
// showing the rows of the chosen method only. Values are the text `moewb quantize` takes for the flag.
#include <QMap>
#include <QString>
#include <QWidget>

class QFormLayout;

namespace moewb::gui {

class MethodOptionsForm : public QWidget {
  Q_OBJECT
 public:
  explicit MethodOptionsForm(QWidget* parent = nullptr);
  void setMethod(const QString& method);  // shows that method's rows
  QString method() const { return method_; }
  // The shown method's options (every one, defaults included).
  QMap<QString, QString> values() const;
  // Sets the editors of the given options (others keep their values); unknown names are ignored.
  void setValues(const QMap<QString, QString>& values);
  QWidget* editor(const QString& option) const { return editors_.value(option); }

 signals:
  void valuesChanged();

 private:
  QString valueOf(const QString& option) const;
  void setValueOf(const QString& option, const QString& value);
  QFormLayout* form_;
  QString method_;
  QMap<QString, QWidget*> editors_;  // by option name, shared by the methods that take the option
};

}  // namespace moewb::gui

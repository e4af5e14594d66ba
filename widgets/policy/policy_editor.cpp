// SPDX-License-Identifier: MIT
#include "policy/policy_editor.h"

#include <algorithm>
#include <cmath>

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QTableWidget>
#include <QToolButton>
#include <QUndoStack>
#include <QVBoxLayout>

#include "policy/policy_commands.h"

namespace moewb::gui {

namespace {
enum MergeIds { BudgetMerge = 2 };
}

PolicyEditor::PolicyEditor(QWidget* parent)
    : QWidget(parent),
      undo_(new QUndoStack(this)),
      expression_(new QLineEdit(this)),
      termKind_(new QComboBox(this)),
      termRank_(new QSpinBox(this)),
      budgetOn_(new QCheckBox(tr("Memory budget"), this)),
      budget_(new QDoubleSpinBox(this)),
      overrides_(new QTableWidget(0, 2, this)),
      totals_(new QLabel(this)),
      error_(new QLabel(this)) {
  expression_->setObjectName(QStringLiteral("policyExpression"));
  expression_->setPlaceholderText(QStringLiteral("dense-512+kurtosis-16"));
  for (const char* kind : {"uniform", "dense", "sparse", "frequency", "kurtosis"})
    termKind_->addItem(QString::fromLatin1(kind));
  termKind_->setToolTip(
      tr("uniform: every tensor · dense: attention, dense MLPs, shared experts · sparse: routed experts · "
         "frequency: experts by activation frequency · kurtosis: heavier tails get more rank"));
  termRank_->setRange(0, 4096);
  termRank_->setValue(16);
  auto* addTermButton = new QPushButton(tr("Add term"), this);
  auto* replaceTerm = new QPushButton(tr("Replace"), this);
  budget_->setRange(0.01, 1e7);
  budget_->setDecimals(2);
  budget_->setSuffix(QStringLiteral(" MB"));
  budget_->setValue(10);
  budget_->setEnabled(false);
  overrides_->setHorizontalHeaderLabels({tr("Tensor"), tr("Rank")});
  overrides_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  overrides_->verticalHeader()->hide();
  overrides_->setSelectionBehavior(QAbstractItemView::SelectRows);
  overrides_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  auto* removeOverrides = new QPushButton(tr("Remove selected overrides"), this);
  auto* undoButton = new QToolButton(this);
  undoButton->setDefaultAction(undo_->createUndoAction(this, tr("Undo")));
  auto* redoButton = new QToolButton(this);
  redoButton->setDefaultAction(undo_->createRedoAction(this, tr("Redo")));
  totals_->setObjectName(QStringLiteral("policyTotals"));
  budgetOn_->setObjectName(QStringLiteral("policyBudgetOn"));
  totals_->setTextFormat(Qt::RichText);
  error_->setStyleSheet(QStringLiteral("color: #c83232"));
  error_->setWordWrap(true);

  auto* builder = new QHBoxLayout;
  builder->addWidget(termKind_);
  builder->addWidget(termRank_);
  builder->addWidget(addTermButton);
  builder->addWidget(replaceTerm);
  builder->addStretch();
  builder->addWidget(undoButton);
  builder->addWidget(redoButton);
  auto* budgetRow = new QHBoxLayout;
  budgetRow->addWidget(budgetOn_);
  budgetRow->addWidget(budget_);
  budgetRow->addStretch();
  auto* form = new QFormLayout;
  form->addRow(tr("Policy"), expression_);
  form->addRow(tr("Build"), builder);
  form->addRow(QString(), budgetRow);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(form);
  layout->addWidget(error_);
  layout->addWidget(totals_);
  layout->addWidget(
      new QLabel(tr("Per-tensor overrides (set them from the heatmap or the tensor table):"), this));
  layout->addWidget(overrides_, 1);
  layout->addWidget(removeOverrides, 0, Qt::AlignLeft);

  connect(expression_, &QLineEdit::editingFinished, this, [this] { setExpression(expression_->text()); });
  connect(addTermButton, &QPushButton::clicked, this,
          [this] { this->addTerm(termKind_->currentText(), termRank_->value()); });
  connect(replaceTerm, &QPushButton::clicked, this, [this] {
    setExpression(QStringLiteral("%1-%2").arg(termKind_->currentText()).arg(termRank_->value()));
  });
  connect(budgetOn_, &QCheckBox::toggled, this, [this](bool on) {
    if (!on) return setBudget(std::nullopt);
    // Start where the current policy is (what the model weighs now), never below the model's own minimum:
    // a budget under it cannot be met and would only show an error.
    double start = budget_->value();
    if (evaluation_.ok && evaluation_.totalMB > 0) start = evaluation_.totalMB;
    if (evaluation_.minimumMB > 0) start = std::max(start, std::ceil(evaluation_.minimumMB * 100.0) / 100.0);
    setBudget(start);
  });
  connect(budget_, &QDoubleSpinBox::valueChanged, this, [this](double v) {
    if (budgetOn_->isChecked()) setBudget(v);
  });
  connect(removeOverrides, &QPushButton::clicked, this, [this] {
    std::vector<std::string> names;
    for (const QModelIndex& i : overrides_->selectionModel()->selectedRows())
      names.push_back(overrides_->item(i.row(), 0)->text().toStdString());
    clearOverrides(names);
  });
  syncWidgets();
}

void PolicyEditor::setEvaluator(PolicyEvaluator evaluator) {
  evaluator_ = std::move(evaluator);
  reevaluate();
}

void PolicyEditor::resetState(const PolicyState& state) {
  undo_->clear();
  applyState(state);
}

void PolicyEditor::push(const PolicyState& after, const QString& text, int mergeId) {
  if (after == state_) return;
  undo_->push(new PolicyEditCommand(this, state_, after, text, mergeId));
}

void PolicyEditor::setExpression(const QString& expression) {
  PolicyState s = state_;
  s.expression = expression.trimmed();
  // Not merged: each committed expression or added term is a policy the user chose, its own undo step.
  push(s, tr("Set policy to %1").arg(s.expression));
}

void PolicyEditor::addTerm(const QString& kind, int rank) {
  const QString term = QStringLiteral("%1-%2").arg(kind).arg(rank);
  setExpression(state_.expression.isEmpty() ? term : state_.expression + QLatin1Char('+') + term);
}

void PolicyEditor::setBudget(std::optional<double> megabytes) {
  PolicyState s = state_;
  s.budgetMB = megabytes;
  push(s, megabytes ? tr("Set budget to %1 MB").arg(*megabytes) : tr("Remove budget"), BudgetMerge);
}

void PolicyEditor::setOverrides(const std::vector<std::string>& names, int rank) {
  PolicyState s = state_;
  for (const std::string& n : names) s.overrides[n] = rank;
  push(s, tr("Set rank %1 on %n tensor(s)", nullptr, int(names.size())).arg(rank));
}

void PolicyEditor::clearOverrides(const std::vector<std::string>& names) {
  PolicyState s = state_;
  for (const std::string& n : names) s.overrides.erase(n);
  push(s, tr("Remove %n override(s)", nullptr, int(names.size())));
}

void PolicyEditor::applyState(const PolicyState& state) {
  state_ = state;
  syncWidgets();
  reevaluate();
}

void PolicyEditor::syncWidgets() {
  {
    const QSignalBlocker b1(expression_), b2(budgetOn_), b3(budget_);
    if (expression_->text() != state_.expression) expression_->setText(state_.expression);
    budgetOn_->setChecked(state_.budgetMB.has_value());
    budget_->setEnabled(state_.budgetMB.has_value());
    if (state_.budgetMB) budget_->setValue(*state_.budgetMB);
  }
  overrides_->setRowCount(int(state_.overrides.size()));
  int row = 0;
  for (const auto& [name, rank] : state_.overrides) {
    overrides_->setItem(row, 0, new QTableWidgetItem(QString::fromStdString(name)));
    auto* r = new QTableWidgetItem(QString::number(rank));
    r->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    overrides_->setItem(row, 1, r);
    ++row;
  }
}

void PolicyEditor::reevaluate() {
  if (!evaluator_) {
    totals_->setText(tr("<i>Open a model to see totals.</i>"));
    return;
  }
  evaluation_ = evaluator_(state_);
  error_->setText(evaluation_.ok ? QString() : evaluation_.error);
  error_->setVisible(!evaluation_.ok);
  if (evaluation_.ok) {
    const double ratio =
        evaluation_.originalMB > 0 ? 100.0 * evaluation_.totalMB / evaluation_.originalMB : 0;
    totals_->setText(tr("<table cellspacing=6><tr><td>average rank</td><td align=right><b>%1</b></td>"
                        "<td>compensators</td><td align=right><b>%2 MB</b></td></tr>"
                        "<tr><td>total model</td><td align=right><b>%3 MB</b></td><td>original</td>"
                        "<td align=right>%4 MB (%5 %)</td></tr>"
                        "<tr><td>bits per weight</td><td align=right><b>%6</b></td></tr></table>")
                         .arg(evaluation_.averageRank, 0, 'f', 2)
                         .arg(evaluation_.compensatorMB, 0, 'f', 2)
                         .arg(evaluation_.totalMB, 0, 'f', 2)
                         .arg(evaluation_.originalMB, 0, 'f', 2)
                         .arg(ratio, 0, 'f', 1)
                         .arg(evaluation_.bitsPerWeight, 0, 'f', 3) +
                     (evaluation_.resolvedPolicy.isEmpty()
                          ? QString()
                          : tr("The budget resolves to the policy <b>%1</b>.")
                                .arg(evaluation_.resolvedPolicy.toHtmlEscaped())));
  }
  if (!evaluation_.ok && state_.budgetMB && evaluation_.minimumMB > 0)
    error_->setText(evaluation_.error +
                    tr(" (the smallest budget this model allows is %1 MB)").arg(evaluation_.minimumMB, 0, 'f', 2));
  emit evaluated(evaluation_);
}

}  // namespace moewb::gui

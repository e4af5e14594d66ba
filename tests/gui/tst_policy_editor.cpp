// SPDX-License-Identifier: MIT
// The rank policy editor's undo stack with the real core policy code on the demo model: every edit is one
// undoable step, undo/redo restore the exact state and totals, typing merges, bad input is reported.
#include <QCheckBox>
#include <QLabel>
#include <QLineEdit>
#include <QTest>
#include <QUndoStack>

#include "gui_test_support.h"
#include "moewb/checkpoint.h"
#include "moewb/quant/rank_policy.h"
#include "policy/policy_editor.h"
#include "policy_bridge.h"

using namespace moewb;
using namespace moewb::gui;

class TestPolicyEditor : public QObject {
  Q_OBJECT
  std::shared_ptr<const ModelCatalog> catalog_;
  ModelStats stats_;
  std::shared_ptr<const PolicyContext> context_;

  void attach(PolicyEditor& editor) {
    editor.setEvaluator([c = context_](const PolicyState& s) { return evaluatePolicy(*c, s); });
    editor.resetState(PolicyState{});
  }
  std::size_t matrixNamed(const std::string& needle) const {
    for (std::size_t i = 0; i < catalog_->matrices().size(); ++i)
      if (catalog_->matrices()[i].name.find(needle) != std::string::npos) return i;
    return 0;
  }

 private slots:
  void initTestCase() {
    test::isolateSettings();
    catalog_ = std::make_shared<const ModelCatalog>(Checkpoint::open(test::demoModel().toStdString()));
    stats_ = computeModelStats(*catalog_);
    context_ = makePolicyContext(*catalog_, &stats_, QuantSettings{});
  }

  void startsEvaluatedWithAnEmptyHistory() {
    PolicyEditor editor;
    attach(editor);
    QVERIFY2(editor.evaluation().ok, qPrintable(editor.evaluation().error));
    QCOMPARE(editor.evaluation().averageRank, 16.0);
    QVERIFY(editor.evaluation().compensatorMB > 0);
    QVERIFY(editor.evaluation().totalMB < editor.evaluation().originalMB);
    QCOMPARE(editor.undoStack()->count(), 0);
  }

  void everyEditUndoesAndRedoesExactly() {
    PolicyEditor editor;
    attach(editor);
    const PolicyState s0 = editor.state();
    const PolicyEvaluation e0 = editor.evaluation();
    const std::size_t q = matrixNamed("layers.0.self_attn.q_proj"),
                      w2 = matrixNamed("layers.1.block_sparse_moe.experts.3.w2");

    editor.setExpression(QStringLiteral("dense-32+sparse-8"));
    QCOMPARE(editor.evaluation().ranks[q], 32);
    QCOMPARE(editor.evaluation().ranks[w2], 8);
    editor.setBudget(12.0);  // the bases and untouched tensors alone need ~10.1 MB
    QVERIFY2(editor.evaluation().ok, qPrintable(editor.evaluation().error));
    QVERIFY(editor.evaluation().totalMB <= 12.0 + 1e-9);
    QVERIFY(editor.evaluation().totalMB > 10.0);
    editor.setOverrides({catalog_->matrices()[w2].name}, 100);
    QCOMPARE(editor.evaluation().ranks[w2], 100);  // an override wins over the budget's choice
    const PolicyState s3 = editor.state();
    const PolicyEvaluation e3 = editor.evaluation();
    QCOMPARE(editor.undoStack()->count(), 3);

    editor.undoStack()->undo();
    QVERIFY(editor.state().overrides.empty());
    QVERIFY(editor.state().budgetMB.has_value());
    editor.undoStack()->undo();
    QVERIFY(!editor.state().budgetMB.has_value());
    QCOMPARE(editor.evaluation().ranks[w2], 8);
    editor.undoStack()->undo();
    QCOMPARE(editor.state(), s0);
    QCOMPARE(editor.evaluation().ranks, e0.ranks);
    QCOMPARE(editor.evaluation().totalMB, e0.totalMB);
    QCOMPARE(editor.findChild<QLineEdit*>(QStringLiteral("policyExpression"))->text(), s0.expression);

    for (int i = 0; i < 3; ++i) editor.undoStack()->redo();
    QCOMPARE(editor.state(), s3);
    QCOMPARE(editor.evaluation().ranks, e3.ranks);
    QCOMPARE(editor.evaluation().compensatorMB, e3.compensatorMB);
  }

  void manyCellsAtOnceAreOneStep() {
    PolicyEditor editor;
    attach(editor);
    std::vector<std::string> names;
    for (std::size_t i = 0; i < 20; ++i) names.push_back(catalog_->matrices()[i].name);
    editor.setOverrides(names, 4);
    QCOMPARE(editor.undoStack()->count(), 1);
    QCOMPARE(editor.state().overrides.size(), std::size_t(20));
    editor.clearOverrides({names[0], names[1]});
    QCOMPARE(editor.state().overrides.size(), std::size_t(18));
    editor.undoStack()->undo();
    QCOMPARE(editor.state().overrides.size(), std::size_t(20));
  }

  // Issue #38 item 4: each policy the user sets (an expression committed, a term added) is its own undo
  // step named after it; "Undo Set policy to dense-64+kurtosis-16" must restore the policy before it.
  void eachExpressionEditIsItsOwnUndoStep() {
    PolicyEditor editor;
    attach(editor);
    editor.setExpression(QStringLiteral("sparse-8+dense-64"));
    editor.setExpression(QStringLiteral("dense-64+kurtosis-16"));
    QCOMPARE(editor.undoStack()->count(), 2);
    QCOMPARE(editor.undoStack()->undoText(), QStringLiteral("Set policy to dense-64+kurtosis-16"));
    editor.undoStack()->undo();
    QCOMPARE(editor.state().expression, QStringLiteral("sparse-8+dense-64"));
    QCOMPARE(editor.undoStack()->undoText(), QStringLiteral("Set policy to sparse-8+dense-64"));
    editor.undoStack()->undo();
    QCOMPARE(editor.state().expression, QStringLiteral("uniform-16"));
  }

  // Issue #38 item 5: turning the budget on starts at a budget the model can meet (not below its own
  // minimum, which only gave an error) and the totals say which policy the budget resolved to.
  void budgetModeStartsFeasibleAndShowsTheResolvedPolicy() {
    PolicyEditor editor;
    attach(editor);
    auto* box = editor.findChild<QCheckBox*>(QStringLiteral("policyBudgetOn"));
    QVERIFY(box);
    box->setChecked(true);
    QVERIFY(editor.state().budgetMB.has_value());
    QVERIFY2(editor.evaluation().ok, qPrintable(editor.evaluation().error));
    QVERIFY(*editor.state().budgetMB >= editor.evaluation().minimumMB);
    QVERIFY(!editor.evaluation().resolvedPolicy.isEmpty());
    // The resolved policy is one the parser reads back.
    QVERIFY(quant::RankPolicy::parse(editor.evaluation().resolvedPolicy.toStdString()).text().size() > 0);
    auto* totals = editor.findChild<QLabel*>(QStringLiteral("policyTotals"));
    QVERIFY(totals);
    QVERIFY2(totals->text().contains(editor.evaluation().resolvedPolicy.toHtmlEscaped()), qPrintable(totals->text()));
  }

  // A spin box stepping through budgets is one step, named after the value it ended at.
  void budgetStepsMergeUnderTheLastValue() {
    PolicyEditor editor;
    attach(editor);
    editor.setBudget(100.0);
    editor.setBudget(120.0);
    editor.setBudget(140.0);
    QCOMPARE(editor.undoStack()->count(), 1);
    QVERIFY2(editor.undoStack()->undoText().contains(QStringLiteral("140")),
             qPrintable(editor.undoStack()->undoText()));
  }

  void badExpressionIsReportedAndUndoable() {
    PolicyEditor editor;
    attach(editor);
    QSignalSpy evaluated(&editor, &PolicyEditor::evaluated);
    editor.setExpression(QStringLiteral("uniform-x"));
    QCOMPARE(evaluated.count(), 1);
    QVERIFY(!editor.evaluation().ok);
    QVERIFY(!editor.evaluation().error.isEmpty());
    editor.undoStack()->undo();
    QVERIFY(editor.evaluation().ok);
  }

  void kurtosisPolicyWaitsForStatistics() {
    const auto noStats = makePolicyContext(*catalog_, nullptr, QuantSettings{});
    PolicyState s;
    s.expression = QStringLiteral("kurtosis-16");
    QVERIFY(!evaluatePolicy(*noStats, s).ok);
    const PolicyEvaluation e = evaluatePolicy(*context_, s);
    QVERIFY2(e.ok, qPrintable(e.error));
    QVERIFY(std::abs(e.averageRank - 16.0) < 2.0);
  }
};

QTEST_MAIN(TestPolicyEditor)
#include "tst_policy_editor.moc"

// SPDX-License-Identifier: MIT
// The Tensors table's filter while statistics rows stream in (issue #38, item 1): typing a filter, then
// clearing it, must leave each tensor exactly once, and a later filter must show only what it matches —
// the rows it shows are what "quantize only the tensors the table shows" sends to a compression job.
#include <QLineEdit>
#include <QSignalSpy>
#include <QTest>
#include <set>

#include "gui_test_support.h"
#include "main_window.h"
#include "models/tensor_filter_proxy.h"
#include "models/tensor_table_model.h"
#include "tensors_panel.h"
#include "workbench_session.h"

using namespace moewb;
using namespace moewb::gui;

class TestTensorFilter : public QObject {
  Q_OBJECT
 private slots:
  void filterTypedWhileStatisticsArriveStaysConsistent() {
    MainWindow w;
    QSignalSpy finished(w.session(), &WorkbenchSession::statsFinished);
    w.openModel(test::demoModel());
    QTRY_VERIFY_WITH_TIMEOUT(w.session()->catalog() != nullptr, 30000);
    TensorsPanel* panel = w.tensorsPanel();
    // Typed before the statistics rows have all arrived (they are inserted in batches).
    panel->filterEdit()->setText(QStringLiteral("kurtosis>0.5"));
    QTRY_VERIFY_WITH_TIMEOUT(finished.count() > 0, 120000);
    QCoreApplication::processEvents();

    panel->filterEdit()->setText(QString());
    const int tensors = w.session()->tensorModel()->rowCount();
    QVERIFY(tensors > 0);
    QCOMPARE(panel->proxy()->rowCount(), tensors);
    // Each tensor once: the source rows behind the proxy's rows are all different.
    std::set<int> sources;
    for (int r = 0; r < panel->proxy()->rowCount(); ++r)
      sources.insert(panel->proxy()->mapToSource(panel->proxy()->index(r, 0)).row());
    QCOMPARE(int(sources.size()), tensors);

    // A later filter shows its rows only (checked by name, independently of the filter code).
    panel->filterEdit()->setText(QStringLiteral("layer:3 block:attention"));
    QVERIFY(panel->proxy()->rowCount() > 0);
    for (int r = 0; r < panel->proxy()->rowCount(); ++r) {
      const QString name = panel->proxy()->index(r, TensorTableModel::Name).data().toString();
      QVERIFY2(name.contains(QStringLiteral("layers.3.self_attn")), qPrintable(name));
    }
    const auto visible = panel->visibleMatrices();
    QCOMPARE(std::set<std::size_t>(visible.begin(), visible.end()).size(), visible.size());
  }
};

QTEST_MAIN(TestTensorFilter)
#include "tst_tensor_filter.moc"

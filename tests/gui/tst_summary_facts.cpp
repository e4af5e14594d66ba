// SPDX-License-Identifier: MIT
// The Summary view shows facts as facts and guesses as guesses (issue #38, item 6): a folder with
// safetensors but no config.json must not read "top-1" (the real model is top-2).
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include "gui_test_support.h"
#include "main_window.h"
#include "summary_panel.h"
#include "workbench_session.h"

using namespace moewb;
using namespace moewb::gui;

class TestSummaryFacts : public QObject {
  Q_OBJECT
 private slots:
  void withConfigTheTopKIsStated() {
    MainWindow w;
    w.openModel(test::demoModel());
    QTRY_VERIFY_WITH_TIMEOUT(w.session()->catalog() != nullptr, 30000);
    const QString html = SummaryPanel::buildHtml(*w.session());
    QVERIFY2(html.contains(QStringLiteral("top-2")), qPrintable(html));
  }

  void withoutConfigTheTopKIsNotGuessed() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    // The demo model's shards and index, without config.json.
    const QDir demo(test::demoModel());
    for (const QString& f : demo.entryList({QStringLiteral("*.safetensors"), QStringLiteral("*.json")}, QDir::Files))
      if (f != QStringLiteral("config.json") && f != QStringLiteral("generation_config.json"))
        QVERIFY(QFile::copy(demo.filePath(f), dir.filePath(f)));
    MainWindow w;
    w.openModel(dir.path());
    QTRY_VERIFY_WITH_TIMEOUT(w.session()->catalog() != nullptr, 30000);
    const QString html = SummaryPanel::buildHtml(*w.session());
    QVERIFY2(!html.contains(QStringLiteral("top-1")), qPrintable(html));
    QVERIFY2(html.contains(QStringLiteral("no config.json")), qPrintable(html));
  }
};

QTEST_MAIN(TestSummaryFacts)
#include "tst_summary_facts.moc"

// SPDX-License-Identifier: MIT
// Project files and reports: a saved session reopens with its policy, settings, results and layout; a
// report folder holds the HTML and Markdown pages, the images they reference and the numbers.
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineEdit>
#include <QTemporaryDir>
#include <QTest>

#include "gui_test_support.h"
#include "heatmap_panel.h"
#include "jobs_panel.h"
#include "main_window.h"
#include "models/heatmap_layout.h"
#include "moewb/quant/model_quantizer.h"
#include "policy/policy_editor.h"
#include "project_file.h"
#include "report_data.h"
#include "report_writer.h"
#include "tensor_analysis.h"
#include "tensors_panel.h"
#include "workbench_session.h"

using namespace moewb;
using namespace moewb::gui;

class TestProjectReport : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { test::isolateSettings(); }

  void projectRoundTripRestoresTheSession() {
    QTemporaryDir tmp;
    const QString project = tmp.filePath(QStringLiteral("session.moewb.json"));
    std::string overridden;
    {
      MainWindow w;
      w.openModel(test::demoModel());
      QTRY_VERIFY_WITH_TIMEOUT(w.session()->statsComplete(), 30000);
      overridden = w.session()->catalog()->matrices()[5].name;
      w.policyEditor()->setExpression(QStringLiteral("dense-32+sparse-8"));
      w.policyEditor()->setOverrides({overridden}, 48);
      QuantSettings hqq;
      hqq.method = QStringLiteral("hqq");
      hqq.options[QStringLiteral("bits")] = QStringLiteral("4");
      w.jobsPanel()->setSettings(hqq);
      QSignalSpy finished(w.session(), &WorkbenchSession::quantizationFinished);
      QVERIFY(w.startQuantization() > 0);
      QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 60000);
      w.tensorsPanel()->filterEdit()->setText(QStringLiteral("block:expert"));
      w.heatmapPanel()->setMetric(HeatmapMetric::RelativeError);
      w.showView(QStringLiteral("heatmap"));
      QString error;
      QVERIFY2(w.saveProject(project, &error), qPrintable(error));
    }
    MainWindow w;
    QString error;
    QVERIFY2(w.openProject(project, &error), qPrintable(error));
    QTRY_VERIFY_WITH_TIMEOUT(w.session()->catalog() != nullptr, 30000);
    QCOMPARE(w.policyEditor()->state().expression, QStringLiteral("dense-32+sparse-8"));
    QCOMPARE(w.policyEditor()->state().overrides.at(overridden), 48);
    QCOMPARE(w.jobsPanel()->settings().method, QStringLiteral("hqq"));
    QCOMPARE(w.jobsPanel()->settings().option(QStringLiteral("bits")), QStringLiteral("4"));
    QCOMPARE(w.session()->resultSettings().option(QStringLiteral("bits")), QStringLiteral("4"));
    QVERIFY(!w.session()->results().empty());
    QCOMPARE(w.currentViewName(), QStringLiteral("heatmap"));
    QCOMPARE(w.heatmapPanel()->metric(), HeatmapMetric::RelativeError);
    QCOMPARE(w.tensorsPanel()->filterEdit()->text(), QStringLiteral("block:expert"));
    QCOMPARE(w.session()->ranks()[5], 48);
  }

  void measuredFrequenciesFeedHeatmapAndPolicy() {
    MainWindow w;
    w.openModel(test::demoModel());
    QTRY_VERIFY_WITH_TIMEOUT(w.session()->statsComplete(), 30000);
    w.policyEditor()->setExpression(QStringLiteral("dense-16+frequency-8"));
    QVERIFY(!w.policyEditor()->evaluation().ok);  // no frequencies yet, and the editor says so
    QTemporaryDir tmp;
    QFile text(tmp.filePath(QStringLiteral("calib.txt")));
    QVERIFY(text.open(QIODevice::WriteOnly));
    for (int i = 0; i < 40; ++i)
      text.write("The quick brown fox jumps over the lazy dog. Python lists are mutable sequences.\n");
    text.close();
    QSignalSpy changed(w.session(), &WorkbenchSession::frequenciesChanged);
    QVERIFY(w.session()->measureExpertFrequencies(text.fileName(), 2) > 0);
    QTRY_COMPARE_WITH_TIMEOUT(changed.count(), 1, 60000);
    const quant::ExpertFrequencies* f = w.session()->expertFrequencies();
    QVERIFY(f && f->counts.size() == 4);
    QCOMPARE(w.heatmapPanel()->metric(), HeatmapMetric::ExpertFrequency);
    w.policyEditor()->reevaluate();
    QVERIFY2(w.policyEditor()->evaluation().ok, qPrintable(w.policyEditor()->evaluation().error));
  }

  void notAProjectIsRefusedWithAReason() {
    QTemporaryDir tmp;
    const QString path = tmp.filePath(QStringLiteral("x.json"));
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{\"hello\": 1}");
    f.close();
    ProjectFile p;
    QString error;
    QVERIFY(!readProjectFile(path, &p, &error));
    QVERIFY(error.contains(QStringLiteral("not a MoE Workbench project")));
  }

  void reportHasPagesImagesAndNumbers() {
    MainWindow w;
    w.resize(1200, 800);
    w.openModel(test::demoModel());
    QTRY_VERIFY_WITH_TIMEOUT(w.session()->statsComplete(), 30000);
    QTemporaryDir tmp;
    const QString dir = tmp.filePath(QStringLiteral("report"));
    QString error;
    QVERIFY2(writeReport(dir, w, &error), qPrintable(error));
    const QDir out(dir);
    for (const char* f : {"report.html", "report.md", "tensors.csv", "tensors.json", "heatmap-kurtosis.png",
                          "heatmap-rank.png"})
      QVERIFY2(out.exists(QString::fromLatin1(f)), f);
    QFile md(out.filePath(QStringLiteral("report.md")));
    QVERIFY(md.open(QIODevice::ReadOnly));
    QVERIFY(md.readAll().contains("![kurtosis](heatmap-kurtosis.png)"));
    QFile csv(out.filePath(QStringLiteral("tensors.csv")));
    QVERIFY(csv.open(QIODevice::ReadOnly));
    const QList<QByteArray> lines = csv.readAll().trimmed().split('\n');
    QCOMPARE(lines.size(), int(w.session()->catalog()->matrices().size()) + 1);
    QFile json(out.filePath(QStringLiteral("tensors.json")));
    QVERIFY(json.open(QIODevice::ReadOnly));
    const QJsonObject root = QJsonDocument::fromJson(json.readAll()).object();
    QVERIFY(root.contains(QStringLiteral("totals")));
    QCOMPARE(root.value(QStringLiteral("tensors")).toArray().size(),
             int(w.session()->catalog()->matrices().size()));
  }

  // The report is built from the session's data, not from widgets: a session with no window at all
  // reports the tensor it analysed and the run with that run's own settings, and a report asked for
  // another tensor names that one (its statistics' histogram, no spectrum it never computed).
  void reportFromSessionDataNamesTensorAndRun() {
    WorkbenchSession session;
    session.open(test::demoModel());
    QTRY_VERIFY_WITH_TIMEOUT(session.statsComplete(), 30000);
    const auto catalog = session.catalog();
    QuantSettings rtn;
    rtn.method = QStringLiteral("rtn");
    rtn.options[QStringLiteral("bits")] = QStringLiteral("4");
    QSignalSpy finished(&session, &WorkbenchSession::quantizationFinished);
    QVERIFY(session.startQuantization(rtn) > 0);
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 60000);
    const QString run = rtn.describe();

    const std::vector<std::size_t> quantizable = quant::quantizableMatrices(*catalog);
    QVERIFY(quantizable.size() >= 2);
    const std::size_t analysed = quantizable.front(), other = quantizable.back();
    const QString analysedName = QString::fromStdString(catalog->matrices()[analysed].name);
    const QString otherName = QString::fromStdString(catalog->matrices()[other].name);
    session.setTensorAnalysis(analyseMatrix(*catalog, analysed, 3, 64, 0));

    auto reportPage = [](const ReportData& data, const QString& dir) {
      QString error;
      if (!writeReport(dir, data, &error)) qWarning() << error;
      QFile md(QDir(dir).filePath(QStringLiteral("report.md")));
      return md.open(QIODevice::ReadOnly) ? QString::fromUtf8(md.readAll()) : QString();
    };
    QTemporaryDir tmp;
    const ReportData data = collectReportData(session);
    QVERIFY(data.tensor && data.tensor->matrix == analysed);
    QVERIFY(data.totals.ok);  // evaluated from the session's policy state, no editor involved
    const QString page = reportPage(data, tmp.filePath(QStringLiteral("a")));
    QVERIFY2(page.contains(QStringLiteral("## Value histogram of ") + analysedName), qPrintable(page));
    QVERIFY(page.contains(QStringLiteral("## Residual spectrum of ") + analysedName));
    QVERIFY(page.contains(QStringLiteral("## Error vs compensator rank of ") + analysedName));
    QVERIFY(
        page.contains(QStringLiteral("## relative quant error of the last run (") + run + QLatin1Char(')')));
    QVERIFY(page.contains(QStringLiteral("## Last run\n\n") + run));
    QVERIFY(!page.contains(otherName + QStringLiteral(" [")));
    QVERIFY(QFile::exists(tmp.filePath(QStringLiteral("a/spectrum.svg"))));

    const QString otherPage =
        reportPage(collectReportData(session, other), tmp.filePath(QStringLiteral("b")));
    QVERIFY2(otherPage.contains(QStringLiteral("## Value histogram of ") + otherName), qPrintable(otherPage));
    QVERIFY(!otherPage.contains(QStringLiteral("Residual spectrum")));
    QVERIFY(!otherPage.contains(analysedName + QStringLiteral(" [")));
    QFile json(tmp.filePath(QStringLiteral("b/tensors.json")));
    QVERIFY(json.open(QIODevice::ReadOnly));
    const QJsonObject root = QJsonDocument::fromJson(json.readAll()).object();
    QCOMPARE(root.value(QStringLiteral("inspected_tensor")).toString(), otherName);
    QCOMPARE(root.value(QStringLiteral("last_run")).toObject().value(QStringLiteral("settings")).toString(),
             run);
  }

  // Issue #38, item 2: a run made with one policy, then the policy changed: the report shows the run's
  // errors under the run's own ranks and policy, and the current policy only as "not run yet".
  void reportKeepsTheRunsPolicyApartFromTheCurrentOne() {
    MainWindow w;
    WorkbenchSession* s = w.session();
    w.openModel(test::demoModel());
    QTRY_VERIFY_WITH_TIMEOUT(s->statsComplete(), 30000);
    std::vector<std::size_t> picked;
    for (std::size_t i = 0; i < s->catalog()->matrices().size() && picked.size() < 2; ++i)
      if (s->catalog()->matrices()[i].name.find("layers.0.self_attn.") != std::string::npos) picked.push_back(i);
    QCOMPARE(picked.size(), std::size_t(2));
    w.policyEditor()->setExpression(QStringLiteral("uniform-8"));
    QuantSettings milo;
    milo.method = QStringLiteral("milo");
    milo.options[QStringLiteral("max-iters")] = QStringLiteral("3");
    QSignalSpy finished(s, &WorkbenchSession::quantizationFinished);
    QVERIFY(s->startQuantization(milo, picked, QStringLiteral("uniform-8")) > 0);
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 60000);
    w.policyEditor()->setExpression(QStringLiteral("uniform-32"));  // edited after the run

    QTemporaryDir tmp;
    QString error;
    QVERIFY2(writeReport(tmp.path(), w, &error), qPrintable(error));
    QFile md(QDir(tmp.path()).filePath(QStringLiteral("report.md")));
    QVERIFY(md.open(QIODevice::ReadOnly));
    const QString page = QString::fromUtf8(md.readAll());
    QVERIFY2(page.contains(QStringLiteral("Ranks of the last run (policy uniform-8)")), qPrintable(page));
    QVERIFY2(page.contains(QStringLiteral("Current policy (not run yet): `uniform-32`")), qPrintable(page));
    QVERIFY(page.contains(QStringLiteral("rank policy uniform-8")));
    QFile json(QDir(tmp.path()).filePath(QStringLiteral("tensors.json")));
    QVERIFY(json.open(QIODevice::ReadOnly));
    const QJsonObject root = QJsonDocument::fromJson(json.readAll()).object();
    QCOMPARE(root.value(QStringLiteral("last_run")).toObject().value(QStringLiteral("policy")).toString(),
             QStringLiteral("uniform-8"));
    int withRun = 0;
    for (const auto& v : root.value(QStringLiteral("tensors")).toArray()) {
      const QJsonObject o = v.toObject();
      if (!o.contains(QStringLiteral("run_rank"))) continue;
      ++withRun;
      QCOMPARE(o.value(QStringLiteral("run_rank")).toInt(), 8);
      QCOMPARE(o.value(QStringLiteral("rank")).toInt(), 32);
    }
    QCOMPARE(withRun, 2);
  }
};

QTEST_MAIN(TestProjectReport)
#include "tst_project_report.moc"

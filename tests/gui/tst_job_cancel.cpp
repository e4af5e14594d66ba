// SPDX-License-Identifier: MIT
// A quantization run driven through the main window like a user would: started, watched (results and
// convergence points stream in), cancelled mid-way (nothing kept, controls consistent), restarted to
// completion and exported; a cancelled export leaves no folder behind.
#include <QDir>
#include <QJsonDocument>
#include <QJsonObject>
#include <QPushButton>
#include <QTemporaryDir>
#include <QTest>

#include "gui_test_support.h"
#include "jobs_panel.h"
#include "main_window.h"
#include "model_export.h"
#include "models/tensor_table_model.h"
#include "moewb/checkpoint.h"
#include "moewb/quant/model_quantizer.h"
#include "policy/policy_editor.h"
#include "workbench_session.h"

using namespace moewb;
using namespace moewb::gui;

class TestJobCancel : public QObject {
  Q_OBJECT

  static void openDemo(MainWindow& w) {
    w.openModel(test::demoModel());
    QTRY_VERIFY_WITH_TIMEOUT(w.session()->statsComplete(), 30000);
  }
  static int erroredRows(const WorkbenchSession& s) {
    int n = 0;
    for (int r = 0; r < s.tensorModel()->rowCount(); ++r)
      n += s.tensorModel()->index(r, TensorTableModel::RelError).data().isValid();
    return n;
  }

 private slots:
  void initTestCase() { test::isolateSettings(); }

  void cancelledRunKeepsNothingAndRestartCompletes() {
    MainWindow w;
    openDemo(w);
    WorkbenchSession* s = w.session();
    QSignalSpy arrived(s, &WorkbenchSession::resultArrived);
    QSignalSpy points(s, &WorkbenchSession::convergencePoint);
    QSignalSpy finished(s, &WorkbenchSession::quantizationFinished);

    QuantSettings milo;
    milo.method = QStringLiteral("milo");
    w.jobsPanel()->setSettings(milo);
    w.jobsPanel()->runButton()->click();
    QVERIFY(s->quantizationRunning());
    QVERIFY(!w.jobsPanel()->runButton()->isEnabled());
    QVERIFY(w.jobsPanel()->cancelButton()->isEnabled());
    QTRY_VERIFY_WITH_TIMEOUT(arrived.count() >= 1, 60000);  // watched: results stream in...
    QVERIFY(points.count() >= 1);                           // ...and the live convergence curve
    QVERIFY(erroredRows(*s) >= 1);
    const int job = s->quantizationJob();
    w.jobsPanel()->cancelButton()->click();
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 30000);
    QCOMPARE(finished.first().first().value<JobState>(), JobState::Cancelled);
    QCOMPARE(s->jobs()->job(job)->state, JobState::Cancelled);
    QVERIFY(!s->quantizationRunning());
    QVERIFY(s->results().empty());
    QVERIFY(s->pendingResults().empty());
    QVERIFY(!s->quantization());
    QCOMPARE(erroredRows(*s), 0);  // the partial errors left the table
    QVERIFY(w.jobsPanel()->runButton()->isEnabled());
    QVERIFY(!w.jobsPanel()->cancelButton()->isEnabled());

    // Restart (RTN so the test stays quick) and run to completion.
    QuantSettings rtn;
    rtn.method = QStringLiteral("rtn");
    w.jobsPanel()->setSettings(rtn);
    QVERIFY(w.startQuantization() > 0);
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 2, 60000);
    QCOMPARE(finished.last().first().value<JobState>(), JobState::Done);
    const std::size_t quantizable = quant::quantizableMatrices(*s->catalog()).size();
    QCOMPARE(s->results().size(), quantizable);
    QVERIFY(s->quantization());
    QCOMPARE(erroredRows(*s), int(quantizable));

    // Export of the completed run: the folder appears with its manifest.
    QTemporaryDir tmp;
    const QString out = tmp.filePath(QStringLiteral("rtn-export"));
    QSignalSpy jobDone(s->jobs(), &JobRunner::jobFinished);
    const int exportJob = startModelExport(*s, rtn, QString(), out);
    QTRY_VERIFY_WITH_TIMEOUT(!jobDone.isEmpty() && jobDone.last().first().toInt() == exportJob, 60000);
    QCOMPARE(jobDone.last().at(1).value<JobState>(), JobState::Done);
    QVERIFY(QFile::exists(QDir(out).filePath(QStringLiteral("manifest.json"))));

    // Issue #38, item 7: the GUI exports a dequantized bf16 checkpoint too (`moewb quantize --dequantized`):
    // the source's layout, every tensor, loadable as a checkpoint, the quantized matrices changed.
    const QString deq = tmp.filePath(QStringLiteral("rtn-dequantized"));
    const int deqJob = startModelExport(*s, rtn, QString(), deq, ExportKind::Dequantized);
    QTRY_VERIFY_WITH_TIMEOUT(!jobDone.isEmpty() && jobDone.last().first().toInt() == deqJob, 60000);
    QCOMPARE(jobDone.last().at(1).value<JobState>(), JobState::Done);
    QVERIFY(!QFile::exists(QDir(deq).filePath(QStringLiteral("manifest.json"))));
    auto exported = Checkpoint::open(deq.toStdString());
    const Checkpoint& source = s->catalog()->checkpoint();
    QCOMPARE(exported->tensors().size(), source.tensors().size());
    const std::string name = s->catalog()->matrices()[quant::quantizableMatrices(*s->catalog()).front()].name;
    const auto a = exported->readFloat(*exported->find(name));
    const auto b = source.readFloat(*source.find(name));
    QCOMPARE(a.size(), b.size());
    QVERIFY2(a != b, "the dequantized matrix equals the original: nothing was quantized");
  }

  void miloRunOnSomeTensorsExportsTheirCompensators() {
    MainWindow w;
    openDemo(w);
    WorkbenchSession* s = w.session();
    // Two small attention matrices keep the MiLo run short; ranks come from the policy editor.
    std::vector<std::size_t> picked;
    for (std::size_t i = 0; i < s->catalog()->matrices().size() && picked.size() < 2; ++i)
      if (s->catalog()->matrices()[i].name.find("layers.0.self_attn.k_proj") != std::string::npos ||
          s->catalog()->matrices()[i].name.find("layers.0.self_attn.v_proj") != std::string::npos)
        picked.push_back(i);
    QCOMPARE(picked.size(), std::size_t(2));
    w.policyEditor()->setExpression(QStringLiteral("uniform-8"));
    QuantSettings milo;
    milo.method = QStringLiteral("milo");
    milo.options[QStringLiteral("max-iters")] = QStringLiteral("5");
    QSignalSpy finished(s, &WorkbenchSession::quantizationFinished);
    QVERIFY(s->startQuantization(milo, picked, QStringLiteral("uniform-8")) > 0);
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 60000);
    QCOMPARE(finished.first().first().value<JobState>(), JobState::Done);
    QCOMPARE(s->results().size(), std::size_t(2));
    QCOMPARE(s->results().begin()->second.rank, 8);
    QVERIFY(!s->results().begin()->second.curve.empty());

    QTemporaryDir tmp;
    const QString out = tmp.filePath(QStringLiteral("milo-export"));
    QSignalSpy jobDone(s->jobs(), &JobRunner::jobFinished);
    const int job = startModelExport(*s, milo, QStringLiteral("uniform-8"), out);
    QTRY_VERIFY_WITH_TIMEOUT(!jobDone.isEmpty() && jobDone.last().first().toInt() == job, 60000);
    QCOMPARE(jobDone.last().at(1).value<JobState>(), JobState::Done);
    QFile manifest(QDir(out).filePath(QStringLiteral("manifest.json")));
    QVERIFY(manifest.open(QIODevice::ReadOnly));
    const QJsonObject tensors =
        QJsonDocument::fromJson(manifest.readAll()).object().value("tensors").toObject();
    QCOMPARE(tensors.size(), 2);
    QCOMPARE(tensors.begin().value().toObject().value("rank").toInt(), 8);
  }

  void cancelledExportLeavesNoFolder() {
    MainWindow w;
    openDemo(w);
    WorkbenchSession* s = w.session();
    QTemporaryDir tmp;
    const QString out = tmp.filePath(QStringLiteral("milo-export"));
    QuantSettings milo;
    milo.method = QStringLiteral("milo");
    QSignalSpy finished(s->jobs(), &JobRunner::jobFinished);
    // No completed run: the export quantizes first (slow), so it can be cancelled mid-way.
    const int job = startModelExport(*s, milo, QStringLiteral("uniform-16"), out);
    QTRY_VERIFY_WITH_TIMEOUT(s->jobs()->job(job)->fraction > 0.0, 60000);
    s->jobs()->cancel(job);
    QTRY_VERIFY_WITH_TIMEOUT(!finished.isEmpty() && finished.last().first().toInt() == job, 60000);
    QCOMPARE(s->jobs()->job(job)->state, JobState::Cancelled);
    QVERIFY(!QFileInfo::exists(out));
    QCOMPARE(QDir(tmp.path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden),
             QStringList());
    QVERIFY(!s->jobs()->busy());
  }
};

QTEST_MAIN(TestJobCancel)
#include "tst_job_cancel.moc"

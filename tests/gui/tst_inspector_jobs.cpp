// SPDX-License-Identifier: MIT
// The tensor inspector's analysis is a JobRunner job like every other computation of the workbench: it
// appears in the runner (progress, stages, Cancel), its result arrives through the runner's completion,
// and an analysis that was superseded by a newer selection or cancelled from the jobs view is dropped.
#include <QSignalSpy>
#include <QTest>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "gui_test_support.h"
#include "inspector_panel.h"
#include "jobs/job_runner.h"
#include "moewb/progress.h"
#include "tensor_analysis.h"
#include "workbench_session.h"

using namespace moewb;
using namespace moewb::gui;

class TestInspectorJobs : public QObject {
  Q_OBJECT

  static void openDemo(WorkbenchSession& s) {
    s.open(test::demoModel());
    QTRY_VERIFY_WITH_TIMEOUT(s.statsComplete(), 30000);
    QTRY_VERIFY_WITH_TIMEOUT(!s.jobs()->busy(), 30000);
  }
  // Keeps the runner busy until `release` is set, so that analyses queue behind it deterministically.
  static int blockRunner(JobRunner* jobs, std::shared_ptr<std::atomic<bool>> release) {
    return jobs->submit(QStringLiteral("blocker"), [release](const ProgressFn& progress) {
      while (!release->load()) {
        if (!progress(0.0, "waiting")) throw Cancelled{};
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }

 private slots:
  void initTestCase() { test::isolateSettings(); }

  void analysisArrivesThroughTheRunner() {
    WorkbenchSession session;
    openDemo(session);
    InspectorPanel panel(&session);
    QSignalSpy added(session.jobs(), &JobRunner::jobAdded);
    QSignalSpy shown(&panel, &InspectorPanel::analysisShown);
    QStringList stages;
    connect(session.jobs(), &JobRunner::jobChanged, this, [&](int id) {
      const JobInfo* j = session.jobs()->job(id);
      if (j && !j->stage.isEmpty() && !stages.contains(j->stage)) stages << j->stage;
    });
    const std::size_t matrix = 2;
    panel.showMatrix(matrix);
    QVERIFY(panel.analysisRunning());
    const int job = panel.analysisJob();
    QCOMPARE(added.count(), 1);
    QCOMPARE(added.first().first().toInt(), job);
    const QString name = QString::fromStdString(session.catalog()->matrices()[matrix].name);
    QVERIFY2(session.jobs()->job(job)->title.contains(name), qPrintable(session.jobs()->job(job)->title));
    QTRY_COMPARE_WITH_TIMEOUT(shown.count(), 1, 60000);
    QCOMPARE(session.jobs()->job(job)->state, JobState::Done);
    QVERIFY(!panel.analysisRunning());
    // Progress went through the runner: the analysis's stages reached the jobs view.
    QVERIFY2(stages.contains(QStringLiteral("HQQ")) && stages.contains(QStringLiteral("MiLo preview")),
             qPrintable(stages.join(QStringLiteral(", "))));
    // The numbers are those of the core analysis called directly.
    const TensorAnalysis* a = panel.analysis();
    QVERIFY(a);
    QCOMPARE(a->matrix, matrix);
    const TensorAnalysis direct = analyseMatrix(*session.catalog(), matrix, 3, 64, 16);
    QCOMPARE(a->singularValues.size(), direct.singularValues.size());
    for (std::size_t i = 0; i < direct.singularValues.size(); ++i)
      QVERIFY(std::abs(a->singularValues[i] - direct.singularValues[i]) <= 1e-12 * direct.singularValues[0]);
    QCOMPARE(a->miloCurve.size(), direct.miloCurve.size());
  }

  void supersededAndCancelledAnalysesAreDropped() {
    WorkbenchSession session;
    openDemo(session);
    InspectorPanel panel(&session);
    QSignalSpy shown(&panel, &InspectorPanel::analysisShown);
    auto release = std::make_shared<std::atomic<bool>>(false);
    blockRunner(session.jobs(), release);

    // A newer selection supersedes the queued analysis: it is cancelled and only the newest is shown.
    panel.showMatrix(1);
    const int first = panel.analysisJob();
    panel.showMatrix(3);
    const int second = panel.analysisJob();
    QVERIFY(first != 0 && second != 0 && first != second);
    QCOMPARE(session.jobs()->job(first)->state, JobState::Cancelled);
    release->store(true);
    QTRY_COMPARE_WITH_TIMEOUT(shown.count(), 1, 60000);
    QCOMPARE(session.jobs()->job(second)->state, JobState::Done);
    QVERIFY(panel.analysis());
    QCOMPARE(panel.analysis()->matrix, std::size_t(3));

    // Cancelled from the jobs view (the runner's Cancel): nothing is shown and the panel is free again.
    release->store(false);
    blockRunner(session.jobs(), release);
    panel.showMatrix(4);
    const int third = panel.analysisJob();
    QVERIFY(third != 0);
    session.jobs()->cancel(third);
    QCOMPARE(session.jobs()->job(third)->state, JobState::Cancelled);
    QVERIFY(!panel.analysisRunning());
    QVERIFY(!panel.analysis());
    release->store(true);
    QTRY_VERIFY_WITH_TIMEOUT(!session.jobs()->busy(), 30000);
    QTest::qWait(50);  // any late queued call would have arrived
    QCOMPARE(shown.count(), 1);
    QVERIFY(!panel.analysis());

    // Selecting it again starts a fresh analysis that completes.
    panel.showMatrix(4);
    QTRY_COMPARE_WITH_TIMEOUT(shown.count(), 2, 60000);
    QCOMPARE(panel.analysis()->matrix, std::size_t(4));
  }

  void reopeningTheModelDropsTheRunningAnalysis() {
    WorkbenchSession session;
    openDemo(session);
    InspectorPanel panel(&session);
    QSignalSpy shown(&panel, &InspectorPanel::analysisShown);
    auto release = std::make_shared<std::atomic<bool>>(false);
    blockRunner(session.jobs(), release);
    panel.showMatrix(5);
    const int job = panel.analysisJob();
    session.open(test::demoModel());  // a new generation: the old model's analysis means nothing
    release->store(true);
    QTRY_VERIFY_WITH_TIMEOUT(session.statsComplete() && !session.jobs()->busy(), 30000);
    QCOMPARE(session.jobs()->job(job)->state, JobState::Cancelled);
    QCOMPARE(shown.count(), 0);
    QVERIFY(!panel.currentMatrix());
  }
};

QTEST_MAIN(TestInspectorJobs)
#include "tst_inspector_jobs.moc"

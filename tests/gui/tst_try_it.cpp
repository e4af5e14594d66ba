// SPDX-License-Identifier: MIT
// The "Try it" box (TryItPanel) on the demo model (tiny-mixtral, in the repository): Generate runs the
// request `moewb generate` runs and shows its text and speeds; Stop ends a long generation early, keeps the
// text so far and shows no result; the buttons follow the job.
#include <QElapsedTimer>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTest>

#include "engine_jobs.h"
#include "gui_test_support.h"
#include "jobs/job_runner.h"
#include "jobs/job_status_line.h"
#include "main_window.h"
#include "moewb/jobs/generate_job.h"
#include "try_it_panel.h"
#include "workbench_session.h"

using namespace moewb;
using namespace moewb::gui;

namespace {

JobState waitFor(WorkbenchSession& s, int id, int timeoutMs = 120000) {
  QElapsedTimer t;
  t.start();
  while (t.elapsed() < timeoutMs) {
    const JobInfo* j = s.jobs()->job(id);
    if (j && j->state != JobState::Queued && j->state != JobState::Running) {
      QCoreApplication::processEvents();  // deliver the posted result before the caller looks at it
      return j->state;
    }
    QTest::qWait(20);
  }
  return JobState::Running;
}

}  // namespace

class TestTryIt : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { test::isolateSettings(); }

  void generateShowsWhatTheCliRequestGives() {
    MainWindow w;
    w.openModel(test::demoModel());
    QTRY_VERIFY_WITH_TIMEOUT(w.session()->catalog() != nullptr, 30000);
    QVERIFY(w.showView(QStringLiteral("try-it")));
    QCOMPARE(w.currentViewName(), QStringLiteral("try-it"));
    TryItPanel* panel = w.tryItPanel();
    panel->setRequest({QStringLiteral("The history of the city"), 8});
    QVERIFY(panel->generateButton()->isEnabled());
    const int job = panel->run();
    QVERIFY(job > 0);
    QVERIFY(!panel->generateButton()->isEnabled());
    QVERIFY(panel->stopButton()->isEnabled());
    QCOMPARE(waitFor(*w.session(), job), JobState::Done);

    jobs::GenerateRequest same;
    same.model = w.session()->catalog()->checkpoint().root();
    same.prompt = "The history of the city";
    same.options.max_new_tokens = 8;
    const jobs::GenerateJobResult direct = jobs::runGenerateJob(same);
    QVERIFY(!direct.generation.text.empty());
    QCOMPARE(panel->output()->toPlainText(), QString::fromStdString(direct.generation.text));
    QVERIFY(panel->speeds()->text().contains(QStringLiteral("tokens/s")));
    QVERIFY(panel->generateButton()->isEnabled());
    QVERIFY(!panel->stopButton()->isEnabled());
  }

  void stopKeepsTheTextSoFar() {
    MainWindow w;
    w.openModel(test::demoModel());
    QTRY_VERIFY_WITH_TIMEOUT(w.session()->catalog() != nullptr, 30000);
    TryItPanel* panel = w.tryItPanel();
    panel->setRequest({QStringLiteral("Once upon a time"), 4096});
    const int job = panel->run();
    QVERIFY(job > 0);
    // Stop as soon as the first tokens show.
    QTRY_VERIFY_WITH_TIMEOUT(!panel->output()->toPlainText().isEmpty(), 60000);
    QTest::mouseClick(panel->stopButton(), Qt::LeftButton);
    QCOMPARE(waitFor(*w.session(), job), JobState::Cancelled);
    QVERIFY(!panel->output()->toPlainText().isEmpty());
    QVERIFY(!w.session()->engine()->generation().has_value());
    QVERIFY(panel->speeds()->text().isEmpty());
    QVERIFY(panel->generateButton()->isEnabled());
    QVERIFY(!panel->stopButton()->isEnabled());
  }

  void emptyPromptIsRefusedOnTheStatusLine() {
    MainWindow w;
    w.openModel(test::demoModel());
    QTRY_VERIFY_WITH_TIMEOUT(w.session()->catalog() != nullptr, 30000);
    TryItPanel* panel = w.tryItPanel();
    panel->setRequest({QStringLiteral("   "), 8});
    QCOMPARE(panel->run(), 0);
    QVERIFY(!panel->statusLine()->text().isEmpty());
  }
};

QTEST_MAIN(TestTryIt)
#include "tst_try_it.moc"

// SPDX-License-Identifier: MIT
// The Jobs panel lists what the method registry holds and builds each method's form from its options:
// the toy "sign" method, added by tests/methods/sign_method.cpp alone, appears with its own option and a
// run of it completes; project settings written before methods were registry entries still load.
#include <QComboBox>
#include <QJsonObject>
#include <QSignalSpy>
#include <QTest>

#include "gui_test_support.h"
#include "jobs_panel.h"
#include "main_window.h"
#include "method_options_form.h"
#include "moewb/methods/registry.h"
#include "quant_settings.h"
#include "workbench_session.h"

using namespace moewb;
using namespace moewb::gui;

class TestMethodRegistry : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { test::isolateSettings(); }

  void listsEveryRegisteredMethodWithItsOwnOptions() {
    MainWindow w;
    QComboBox* methods = w.jobsPanel()->methodBox();
    // Every method of the registry, in its order, the test's own "sign" among them.
    QStringList names, registered;
    for (int i = 0; i < methods->count(); ++i) names << methods->itemData(i).toString();
    for (const moewb::methods::WeightMethod* m : moewb::methods::MethodRegistry::instance().all())
      registered << QString::fromStdString(std::string(m->name()));
    QCOMPARE(names, registered);
    QVERIFY(names.contains(QStringLiteral("sign")));
    QCOMPARE(names.mid(0, 3), (QStringList{"rtn", "hqq", "milo"}));
    methods->setCurrentIndex(methods->findData(QStringLiteral("sign")));
    MethodOptionsForm* form = w.jobsPanel()->optionsForm();
    QVERIFY(form->editor(QStringLiteral("scale")) != nullptr);
    QCOMPARE(form->values().keys(), QStringList{"scale"});
    QVERIFY(form->editor(QStringLiteral("bits"))->isHidden());
    methods->setCurrentIndex(methods->findData(QStringLiteral("milo")));
    QVERIFY(form->values().contains(QStringLiteral("compensator")));
    QVERIFY(!form->values().contains(QStringLiteral("scale")));
  }

  void aRegisteredMethodRunsFromThePanel() {
    MainWindow w;
    w.openModel(test::demoModel());
    QTRY_VERIFY_WITH_TIMEOUT(w.session()->catalog() != nullptr, 30000);
    QuantSettings sign;
    sign.method = QStringLiteral("sign");
    sign.options[QStringLiteral("scale")] = QStringLiteral("max-abs");
    w.jobsPanel()->setSettings(sign);
    QCOMPARE(w.jobsPanel()->settings().method, QStringLiteral("sign"));
    QCOMPARE(w.jobsPanel()->settings().option(QStringLiteral("scale")), QStringLiteral("max-abs"));
    QSignalSpy finished(w.session(), &WorkbenchSession::quantizationFinished);
    QVERIFY(w.startQuantization() > 0);
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 60000);
    QCOMPARE(finished.last().first().value<JobState>(), JobState::Done);
    QVERIFY(!w.session()->results().empty());
    QCOMPARE(w.session()->quantization()->settings.method, std::string("sign"));
  }

  void olderProjectSettingsStillLoad() {
    const QJsonObject old{{"method", "milo"}, {"bits", 4}, {"group", 128}, {"max_iterations", 7},
                          {"compensator", "int8"}, {"device", "cpu"}};
    const QuantSettings s = QuantSettings::fromJson(old);
    const quant::QuantizeSettings core = toCoreSettings(s);
    QCOMPARE(core.grouped.bits, 4);
    QCOMPARE(core.grouped.group, 128);
    QCOMPARE(core.milo.max_iters, 7);
    QVERIFY(core.milo.compensator == quant::CompensatorFormat::Int8);
    QCOMPARE(s.device, QStringLiteral("cpu"));
  }
};

QTEST_MAIN(TestMethodRegistry)
#include "tst_method_registry.moc"

// SPDX-License-Identifier: MIT
// `moewb-gui --screenshot` under Xvfb (a real X server with GLX, so the heatmaps use the Dear ImGui
// OpenGL canvas): the binary exits 0 and writes a PNG that is not blank. Skips when xvfb-run is missing.
#include <QImage>
#include <QProcess>
#include <QSet>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

class TestScreenshot : public QObject {
  Q_OBJECT
 private slots:
  void viewRendersNonBlank_data() {
    QTest::addColumn<QString>("view");
    QTest::newRow("heatmap") << QStringLiteral("heatmap");
    QTest::newRow("inspector") << QStringLiteral("inspector");
    // Engine views: captured after their measurement (freq, attention) or the GPU probe (gpu-bench).
    QTest::newRow("freq") << QStringLiteral("freq");
    QTest::newRow("attention") << QStringLiteral("attention");
    QTest::newRow("gpu-bench") << QStringLiteral("gpu-bench");
  }

  void viewRendersNonBlank() {
    QFETCH(QString, view);
    const QString xvfb = QStandardPaths::findExecutable(QStringLiteral("xvfb-run"));
    if (xvfb.isEmpty())
      QSKIP("xvfb-run is not installed (apt-get install xvfb xauth): screenshot test skipped");
    QTemporaryDir tmp;
    const QString png = tmp.filePath(view + QStringLiteral(".png"));
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove(QStringLiteral("QT_QPA_PLATFORM"));  // the X server of xvfb-run, not offscreen
    env.insert(QStringLiteral("XDG_CONFIG_HOME"),
               tmp.path());  // keep recent files out of the user's settings
    p.setProcessEnvironment(env);
    p.start(xvfb, {QStringLiteral("-a"), QStringLiteral("-s"), QStringLiteral("-screen 0 1400x900x24"),
                   QStringLiteral(MOEWB_GUI_PATH), QStringLiteral("--screenshot"), png,
                   QStringLiteral("--view"), view});
    QVERIFY(p.waitForFinished(90000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    const QImage image(png);
    QVERIFY(!image.isNull());
    QVERIFY(image.width() >= 800 && image.height() >= 500);
    // Not blank: many distinct colours (an empty window has a handful).
    QSet<QRgb> colours;
    for (int y = 0; y < image.height(); y += 5)
      for (int x = 0; x < image.width(); x += 5) colours.insert(image.pixel(x, y));
    QVERIFY2(colours.size() > 50, qPrintable(QStringLiteral("only %1 colours").arg(colours.size())));
  }
};

QTEST_MAIN(TestScreenshot)
#include "tst_screenshot.moc"

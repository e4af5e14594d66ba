// SPDX-License-Identifier: MIT
// The Dear ImGui / OpenGL heatmap canvas on a real X server (Xvfb with Mesa's GLX): it is chosen when a
// context can be made, draws the cells, and hovering a cell shows ImGui's tooltip beside it. Relaunches
// itself under xvfb-run (the offscreen platform has no GL); skips when xvfb-run is missing.
#include <QProcess>
#include <QStandardPaths>
#include <QTest>
#include <cmath>

#include "heatmap/heatmap_colours.h"
#include "heatmap/heatmap_image.h"
#include "heatmap/heatmap_interaction.h"
#include "heatmap/heatmap_view.h"

using namespace moewb::gui;

namespace {
bool underXvfb() {
  return qEnvironmentVariableIsSet("MOEWB_TEST_UNDER_XVFB");
}

HeatmapData grid(int rows, int columns) {
  HeatmapData d;
  d.metric = QStringLiteral("kurtosis");
  for (int r = 0; r < rows; ++r) d.rowLabels << QStringLiteral("L%1").arg(r);
  for (int c = 0; c < columns; ++c) d.columnLabels << QStringLiteral("E%1").arg(c);
  for (int i = 0; i < rows * columns; ++i) {
    d.values.push_back(float(std::sin(i * 0.37) + 1.0));
    d.cellNames.push_back(
        QStringLiteral("model.layers.%1.experts.%2.w2.weight").arg(i / columns).arg(i % columns));
  }
  return d;
}
}  // namespace

class TestHeatmapGl : public QObject {
  Q_OBJECT
 private slots:
  void runsUnderXvfb() {
    if (underXvfb()) QSKIP("already under Xvfb: the checks are the next test function");
    const QString xvfb = QStandardPaths::findExecutable(QStringLiteral("xvfb-run"));
    if (xvfb.isEmpty()) QSKIP("xvfb-run is not installed: the OpenGL canvas test is skipped");
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove(QStringLiteral("QT_QPA_PLATFORM"));
    env.insert(QStringLiteral("MOEWB_TEST_UNDER_XVFB"), QStringLiteral("1"));
    p.setProcessEnvironment(env);
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(xvfb, {QStringLiteral("-a"), QStringLiteral("-s"), QStringLiteral("-screen 0 1400x900x24"),
                   QCoreApplication::applicationFilePath(), QStringLiteral("glCanvasDrawsAndShowsTooltip"),
                   QStringLiteral("largeGridDrawsAsOneImage")});
    QVERIFY(p.waitForFinished(90000));
    const QByteArray out = p.readAll();
    QVERIFY2(p.exitCode() == 0, out.constData());
    QVERIFY2(out.contains("PASS   : TestHeatmapGl::glCanvasDrawsAndShowsTooltip()"), out.constData());
    QVERIFY2(out.contains("PASS   : TestHeatmapGl::largeGridDrawsAsOneImage()"), out.constData());
  }

  void glCanvasDrawsAndShowsTooltip() {
    if (!underXvfb()) QSKIP("runs under Xvfb only (see runsUnderXvfb)");
    QVERIFY2(HeatmapView::openGlUsable(), "Xvfb offers GLX: an OpenGL 3 context should be possible");
    HeatmapView view;
    QVERIFY(view.usesOpenGl());
    view.resize(900, 500);
    view.setData(grid(6, 16));
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    QTest::qWait(100);
    const QImage plain = view.grab().toImage();
    QSet<QRgb> colours;
    for (int y = 0; y < plain.height(); y += 6)
      for (int x = 0; x < plain.width(); x += 6) colours.insert(plain.pixel(x, y));
    QVERIFY2(colours.size() > 20, "the GL canvas drew (almost) nothing");

    // Hover a cell: ImGui draws its tooltip next to the mouse, outside the cell.
    const QRectF cell = view.interaction()->cellRect(2, 3);
    QTest::mouseMove(view.canvas(), cell.center().toPoint());
    QTRY_COMPARE(view.interaction()->hoverCell(), QPoint(3, 2));
    QTest::qWait(100);
    const QImage hovered = view.grab().toImage();
    QCOMPARE(hovered.size(), plain.size());
    const QRect around = cell.toAlignedRect().adjusted(-3, -3, 3, 3);
    int changedOutsideCell = 0;
    for (int y = 0; y < plain.height(); ++y)
      for (int x = 0; x < plain.width(); ++x)
        if (!around.contains(x, y) && plain.pixel(x, y) != hovered.pixel(x, y)) ++changedOutsideCell;
    QVERIFY2(changedOutsideCell > 500,
             qPrintable(QStringLiteral("tooltip not drawn (%1 pixels changed)").arg(changedOutsideCell)));
  }

  // An attention map of 4 heads × 300 tokens has ~360k cells: more rectangles than one Dear ImGui draw
  // list can index, so both canvases draw it as one image (a texture in OpenGL). Every sampled cell
  // must show its own value's colour, under Xvfb with the GL canvas and offscreen with QPainter.
  void largeGridDrawsAsOneImage() {
    const HeatmapData data = grid(300, 300);
    QVERIFY(drawsCellsAsImage(data));
    HeatmapView view;
    QCOMPARE(view.usesOpenGl(), underXvfb());
    view.resize(900, 700);
    view.setData(data);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    QTest::qWait(100);
    const QImage image = view.grab().toImage();
    const HeatmapInteraction& in = *view.interaction();
    int wrong = 0, sampled = 0;
    for (int r = 7; r < data.rows(); r += 37)
      for (int c = 11; c < data.columns(); c += 41) {
        const QPoint centre = in.cellRect(r, c).center().toPoint() * image.devicePixelRatio();
        const QColor want = rampColour(in.scale().normalise(data.value(r, c)));
        const QColor got = image.pixelColor(centre);
        ++sampled;
        if (std::abs(got.red() - want.red()) > 6 || std::abs(got.green() - want.green()) > 6 ||
            std::abs(got.blue() - want.blue()) > 6)
          ++wrong;
      }
    QVERIFY2(wrong == 0,
             qPrintable(QStringLiteral("%1 of %2 cells in the wrong colour").arg(wrong).arg(sampled)));
    // Hover still finds the cell (the image is only how the cells are painted).
    QTest::mouseMove(view.canvas(), in.cellRect(120, 45).center().toPoint());
    QTRY_COMPARE(view.interaction()->hoverCell(), QPoint(45, 120));
  }
};

QTEST_MAIN(TestHeatmapGl)
#include "tst_heatmap_gl.moc"

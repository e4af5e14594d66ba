// SPDX-License-Identifier: MIT
// The engine views (frequency, K/V cache and attention, perplexity, GPU benchmark) driven through the
// main window: each job gives exactly what the core function the CLI calls gives directly, files of the
// CLI load, a cancelled job leaves the views idle with no result, and without a GPU the benchmark page
// says so. Small texts and few windows keep it quick.
#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QListWidget>
#include <QProcess>
#include <QPushButton>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>

#include "attention_page.h"
#include "charts/channel_magnitude_plot.h"
#include "charts/xy_plot.h"
#include "engine_jobs.h"
#include "frequency_panel.h"
#include "gpu_bench_panel.h"
#include "gui_test_support.h"
#include "heatmap/heatmap_view.h"
#include "jobs/job_status_line.h"
#include "kv_channels_page.h"
#include "kv_panel.h"
#include "main_window.h"
#include "models/attention_map_model.h"
#include "models/perplexity_table_model.h"
#include "moewb/engine/engine.h"
#include "moewb/engine/evaluate.h"
#include "moewb/engine/kv_capture.h"
#include "moewb/engine/kv_stats.h"
#include "moewb/engine/tokenizer.h"
#include "moewb/engine/variants.h"
#include "perplexity_panel.h"
#include "policy/policy_editor.h"
#include "report_writer.h"
#include "workbench_session.h"

using namespace moewb;
using namespace moewb::gui;

namespace {

// A few hundred tokens: two windows of 64.
QString writeSmallText(const QTemporaryDir& dir) {
  const QString path = dir.filePath(QStringLiteral("small.txt"));
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly)) return {};
  for (int i = 0; i < 12; ++i)
    f.write(
        "DTrace and SystemTap are monitoring tools, each providing a way to inspect what the processes "
        "on a computer system are doing. Python lists are mutable sequences.\n");
  return path;
}

void openDemo(MainWindow& w) {
  w.openModel(test::demoModel());
  QTRY_VERIFY_WITH_TIMEOUT(w.session()->catalog() != nullptr, 30000);
}

// The demo model's engine and the ids of a text as `moewb freq|eval --seq-len 64 --max-windows 2` see
// them: the reference the GUI's jobs are compared with.
struct DirectRun {
  std::unique_ptr<engine::MoeEngine> engine;
  std::vector<int32_t> ids;
  engine::EvalOptions options;
};
DirectRun directRun(MainWindow& w, const QString& text) {
  DirectRun r;
  const std::string model = w.session()->catalog()->checkpoint().root();
  r.engine = engine::MoeEngine::open(model);
  r.ids = engine::loadEvaluationIds(model, text.toStdString(), "", r.engine->config().bos_token_id, false);
  r.options.seq_len = 64;
  r.options.max_windows = 2;
  return r;
}

// Waits for job `id` to leave the runner; returns its final state.
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

class TestEngineViews : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { test::isolateSettings(); }

  void frequencyJobEqualsCoreAndFeedsPolicies() {
    QTemporaryDir tmp;
    const QString text = writeSmallText(tmp);
    MainWindow w;
    openDemo(w);
    FrequencyPanel* panel = w.frequencyPanel();
    panel->setTextFile(text);
    panel->setWindows(64, 2);
    w.policyEditor()->setExpression(QStringLiteral("dense-16+frequency-8"));
    QVERIFY(!w.policyEditor()->evaluation().ok);  // no frequencies yet
    const int job = panel->run();
    QVERIFY(job > 0);
    QVERIFY(!panel->runButton()->isEnabled());
    QCOMPARE(waitFor(*w.session(), job), JobState::Done);
    const ExpertFrequencyRecord* record = w.session()->frequencyRecord();
    QVERIFY(record);

    // The same measurement straight from core, as `moewb freq --seq-len 64 --max-windows 2` does it.
    const DirectRun run = directRun(w, text);
    const engine::ExpertFrequency direct = engine::measureExpertFrequency(*run.engine, run.ids, run.options);
    QCOMPARE(record->frequency.tokens, direct.tokens);
    QCOMPARE(record->frequency.top_k, direct.top_k);
    QCOMPARE(record->frequency.layers.size(), direct.layers.size());
    for (std::size_t l = 0; l < direct.layers.size(); ++l) {
      QCOMPARE(record->frequency.layers[l].layer, direct.layers[l].layer);
      QVERIFY(record->frequency.layers[l].counts == direct.layers[l].counts);
    }
    // The heatmap shows count / tokens with the count on hover.
    const HeatmapData& map = panel->view()->data();
    QCOMPARE(map.rows(), int(direct.layers.size()));
    QCOMPARE(map.columns(), direct.num_experts);
    QCOMPARE(map.value(1, 3), float(double(direct.layers[1].counts[3]) / double(direct.tokens)));
    QVERIFY(cellTooltip(map, 1, 3).contains(QString::number(direct.layers[1].counts[3])));
    // frequency-R policies now evaluate with these counts.
    QVERIFY(w.session()->expertFrequencies());
    QCOMPARE(w.session()->expertFrequencies()->counts.at(direct.layers[0].layer).at(0),
             double(direct.layers[0].counts[0]));
    w.policyEditor()->reevaluate();
    QVERIFY2(w.policyEditor()->evaluation().ok, qPrintable(w.policyEditor()->evaluation().error));

    // Exports are the CLI's formats, and they load back.
    QString error;
    const QString json = tmp.filePath(QStringLiteral("f.json")), csv = tmp.filePath(QStringLiteral("f.csv"));
    QVERIFY2(panel->exportJson(json, &error), qPrintable(error));
    QVERIFY2(panel->exportCsv(csv, &error), qPrintable(error));
    QVERIFY2(panel->exportImage(tmp.filePath(QStringLiteral("f.svg")), &error), qPrintable(error));
    QVERIFY2(panel->exportImage(tmp.filePath(QStringLiteral("f.png")), &error), qPrintable(error));
    QFile csvFile(csv);
    QVERIFY(csvFile.open(QIODevice::ReadOnly));
    QCOMPARE(csvFile.readAll().toStdString(), direct.toCsv());
    for (const QString& file : {json, csv}) {
      const ExpertFrequencyRecord back = loadExpertFrequencyRecord(file);
      QCOMPARE(back.frequency.tokens, direct.tokens);
      QCOMPARE(back.frequency.top_k, direct.top_k);
      QVERIFY(back.frequency.layers.back().counts == direct.layers.back().counts);
    }
  }

  void frequencyJsonOfTheCliLoads() {
    // The real `moewb freq --json`, so a change of its output format cannot go unnoticed here.
    QTemporaryDir tmp;
    const QString text = writeSmallText(tmp);
    QProcess cli;
    cli.start(QStringLiteral(MOEWB_CLI_PATH),
              {QStringLiteral("freq"), test::demoModel(), QStringLiteral("--text"), text,
               QStringLiteral("--seq-len"), QStringLiteral("64"), QStringLiteral("--max-windows"),
               QStringLiteral("2"), QStringLiteral("--json")});
    QVERIFY(cli.waitForFinished(120000));
    QVERIFY2(cli.exitCode() == 0, cli.readAllStandardError().constData());
    const QString json = tmp.filePath(QStringLiteral("freq.json"));
    QFile out(json);
    QVERIFY(out.open(QIODevice::WriteOnly));
    out.write(cli.readAllStandardOutput());
    out.close();

    MainWindow w;
    openDemo(w);
    QString error;
    QVERIFY2(w.frequencyPanel()->loadFile(json, &error), qPrintable(error));
    const ExpertFrequencyRecord* record = w.session()->frequencyRecord();
    QVERIFY(record && record->knowsTokens());
    QCOMPARE(record->seqLen, 64);
    QCOMPARE(record->frequency.layers.size(), std::size_t(4));
    QVERIFY(w.session()->expertFrequencies());
    QCOMPARE(w.frequencyPanel()->view()->data().rows(), 4);
    // Every layer's fractions sum to top-k: each token picks top-k experts.
    double sum = 0;
    for (int e = 0; e < record->frequency.num_experts; ++e) sum += record->fraction(2, e);
    QCOMPARE(std::lround(sum), long(record->frequency.top_k));

    // A broken file is refused with its name in the message, and the loaded counts stay.
    const QString bad = tmp.filePath(QStringLiteral("bad.csv"));
    QFile b(bad);
    QVERIFY(b.open(QIODevice::WriteOnly));
    b.write("layer,expert,count,fraction\n0,1,seven,0.1\n");
    b.close();
    QVERIFY(!w.frequencyPanel()->loadFile(bad, &error));
    QVERIFY2(error.contains(QStringLiteral("bad.csv:2")), qPrintable(error));
    QCOMPARE(w.session()->frequencyRecord()->seqLen, 64);
  }

  void kvFileOfCoreLoadsIntoAttentionAndChannelViews() {
    QTemporaryDir tmp;
    const QString model = test::demoModel();
    auto engine = engine::MoeEngine::open(model.toStdString());
    auto tokenizer = engine::Tokenizer::forModel(model.toStdString());
    const auto ids = engine::tokenizeForEvaluation(*tokenizer, "The quick brown fox jumps over the lazy dog.",
                                                   engine->config().bos_token_id);
    engine::KvCapture capture = engine::captureKv(*engine, ids, 4);
    const QString file = tmp.filePath(QStringLiteral("kv.safetensors"));
    engine::saveKvCapture(capture, file.toStdString());

    MainWindow w;
    openDemo(w);
    QSignalSpy changed(w.session()->engine(), &EngineJobs::kvCaptureChanged);
    const int job = w.kvPanel()->openFile(file);
    QVERIFY(job > 0);
    QCOMPARE(waitFor(*w.session(), job), JobState::Done);
    QVERIFY(changed.count() >= 1);
    const AttentionMapModel& m = w.kvPanel()->attentionPage()->model();
    const int64_t t = int64_t(ids.size());
    QCOMPARE(m.heads(), capture.heads);
    QCOMPARE(m.heads(), 4);
    QCOMPARE(m.layers(), 4);
    QCOMPARE(m.length(), t);
    QCOMPARE(m.probability(2, 3, t - 1, 0), capture.attentionProb(2, 3, t - 1, 0));

    // One head: query × key, masked above the diagonal, hover names query, key and probability.
    w.kvPanel()->attentionPage()->select(2, 3);
    const HeatmapData& one = w.kvPanel()->attentionPage()->view()->data();
    QCOMPARE(one.rows(), int(t));
    QCOMPARE(one.columns(), int(t));
    QCOMPARE(one.value(int(t) - 1, 1), capture.attentionProb(2, 3, t - 1, 1));
    QVERIFY(std::isnan(one.value(0, 1)));  // key after the query
    const QString tip = cellTooltip(one, int(t) - 1, 1);
    QVERIFY2(tip.contains(QStringLiteral("query %1").arg(t - 1)) && tip.contains(QStringLiteral("key 1")) &&
                 tip.contains(QStringLiteral("p = ")),
             qPrintable(tip));
    // A row of probabilities sums to one.
    double row = 0;
    for (int k = 0; k < int(t); ++k) row += std::isnan(one.value(5, k)) ? 0.0 : one.value(5, k);
    QVERIFY(std::abs(row - 1.0) < 1e-5);
    // All heads: a 2 × 2 grid of t × t blocks with one empty row/column between them.
    w.kvPanel()->attentionPage()->select(1, AttentionMapModel::kAllHeads);
    const HeatmapData& grid = w.kvPanel()->attentionPage()->view()->data();
    QCOMPARE(grid.rows(), int(2 * t + 1));
    QCOMPARE(grid.columns(), int(2 * t + 1));
    const auto cell = m.cellAt(AttentionMapModel::kAllHeads, int(t + 1 + 4), int(t + 1 + 2));  // head 3
    QVERIFY(cell && cell->head == 3 && cell->query == 4 && cell->key == 2);
    QCOMPARE(grid.value(int(t + 1 + 4), int(t + 1 + 2)), capture.attentionProb(1, 3, 4, 2));
    QVERIFY(std::isnan(grid.value(int(t), 0)));  // separator
    // The first-token plot: the mean over heads of each layer is the capture's own summary (to the float
    // rounding of first_token_mass as stored).
    const double meanOverHeads =
        (m.firstTokenMass(0, 0) + m.firstTokenMass(0, 1) + m.firstTokenMass(0, 2) + m.firstTokenMass(0, 3)) /
        4;
    QVERIFY(std::abs(meanOverHeads - capture.sinkMassPerLayer()[0]) < 1e-6);
    QVERIFY(m.uniformFirstTokenMass() > 0 && m.uniformFirstTokenMass() < 1);

    // K/V channels: max |k| per channel is the capture's key_absmax; outliers are marked.
    KvChannelsPage* channels = w.kvPanel()->channelsPage();
    channels->select(3, 1);
    QCOMPARE(channels->keyPlot()->channelCount(), capture.key_dim);
    QCOMPARE(channels->valuePlot()->channelCount(), capture.value_dim);
    const engine::ChannelMagnitudes k = engine::channelMagnitudes(capture, engine::KvTensor::Keys, 3, 1);
    for (int d = 0; d < capture.key_dim; ++d)
      QCOMPARE(float(k.max_abs[std::size_t(d)]),
               capture.key_absmax[std::size_t((3 * capture.kv_heads + 1) * capture.key_dim + d)]);
    channels->setOutlierFactor(1.0);  // everything above the median
    QVERIFY(int(channels->keyPlot()->outliers().size()) >= capture.key_dim / 2 - 1);
    // The page marks exactly core's outlier channels (the definition `moewb kv` prints too).
    QVERIFY(channels->keyPlot()->outliers() == engine::outlierChannels(k.max_abs, 1.0).channels);
    channels->setOutlierFactor(engine::kDefaultOutlierFactor);
    QVERIFY(channels->keyPlot()->outliers() ==
            engine::outlierChannels(k.max_abs, engine::kDefaultOutlierFactor).channels);
    channels->select(0, engine::kAllKvHeads);
    QCOMPARE(channels->keyPlot()->channelCount(), capture.kv_heads * capture.key_dim);
  }

  void kvCaptureJobEqualsCore() {
    MainWindow w;
    openDemo(w);
    const QString prompt =
        QStringLiteral("Python lists are mutable sequences, typically used to store collections.");
    w.kvPanel()->setPrompt(prompt);
    w.kvPanel()->setLimits(12, 3);  // truncated like `moewb kv --max-tokens 12 --first-tokens 3`
    const int job = w.kvPanel()->run();
    QVERIFY(job > 0);
    QCOMPARE(waitFor(*w.session(), job), JobState::Done);
    const auto capture = w.session()->engine()->kvCapture();
    QVERIFY(capture);

    auto engine = engine::MoeEngine::open(test::demoModel().toStdString());
    auto tokenizer = engine::Tokenizer::forModel(test::demoModel().toStdString());
    auto ids = engine::tokenizeForEvaluation(*tokenizer, prompt.toStdString(), engine->config().bos_token_id);
    ids.resize(12);
    const engine::KvCapture direct = engine::captureKv(*engine, ids, 3);
    QVERIFY(capture->ids == direct.ids);
    QCOMPARE(capture->first_tokens, 3);
    QCOMPARE(capture->pieces.size(), ids.size());
    QCOMPARE(capture->attention.size(), direct.attention.size());
    float worst = 0;
    for (std::size_t i = 0; i < direct.attention.size(); ++i)
      worst = std::max(worst, std::abs(capture->attention[i] - direct.attention[i]));
    QVERIFY2(worst < 1e-6f, qPrintable(QString::number(worst)));
    QCOMPARE(w.kvPanel()->attentionPage()->model().length(), int64_t(12));

    // Saved from the GUI, the file is what loadKvCapture (and `moewb kv` users) read.
    QTemporaryDir tmp;
    const QString file = tmp.filePath(QStringLiteral("saved.safetensors"));
    const int save = w.kvPanel()->saveFile(file);
    QCOMPARE(waitFor(*w.session(), save), JobState::Done);
    const engine::KvCapture back = engine::loadKvCapture(file.toStdString());
    QVERIFY(back.keys == capture->keys);
    QVERIFY(back.pieces == capture->pieces);
  }

  void perplexityOriginalRowEqualsCore() {
    QTemporaryDir tmp;
    const QString text = writeSmallText(tmp);
    MainWindow w;
    openDemo(w);
    PerplexityRequest request;
    request.textFile = text;
    request.seqLen = 64;
    request.maxWindows = 2;
    request.quickSpecs = {QStringLiteral("rtn:3")};
    w.perplexityPanel()->setRequest(request);
    const int job = w.perplexityPanel()->run();
    QVERIFY(job > 0);
    QCOMPARE(waitFor(*w.session(), job), JobState::Done);
    const PerplexityTableModel* table = w.perplexityPanel()->table();
    QCOMPARE(table->rowCount(), 2);

    DirectRun run = directRun(w, text);
    const engine::PerplexityResult original = engine::evaluatePerplexity(*run.engine, run.ids, run.options);
    const PerplexityRow& first = table->rows()[0];
    QVERIFY(first.original);
    QCOMPARE(first.variant, QStringLiteral("original"));
    QCOMPARE(first.perplexity, original.ppl);
    QCOMPARE(first.tokensScored, original.tokens_scored);
    QCOMPARE(first.weightBytes, run.engine->checkpoint().totalBytes());

    // The quantized variant: same as quantizeVariant + evaluatePerplexity, smaller as stored.
    const engine::WeightVariant rtn = engine::quantizeVariant(run.engine->checkpointPtr(), "rtn:3");
    run.engine->setWeights(rtn.weights);
    const engine::PerplexityResult quantized = engine::evaluatePerplexity(*run.engine, run.ids, run.options);
    const PerplexityRow& second = table->rows()[1];
    QCOMPARE(second.variant, QStringLiteral("rtn:3"));
    QCOMPARE(second.perplexity, quantized.ppl);
    QVERIFY(second.weightBytes < first.weightBytes);
    QCOMPARE(table->deltaVsOriginal(second), quantized.ppl / original.ppl - 1.0);
    QVERIFY(table->toCsv().contains(QStringLiteral("rtn:3,")));
    QVERIFY(table->toMarkdown().startsWith(QStringLiteral("| variant | perplexity | Δ vs original |")));

    // The report carries the table.
    const QString dir = tmp.filePath(QStringLiteral("report"));
    QString error;
    QVERIFY2(writeReport(dir, w, &error), qPrintable(error));
    QFile md(QDir(dir).filePath(QStringLiteral("report.md")));
    QVERIFY(md.open(QIODevice::ReadOnly));
    const QByteArray page = md.readAll();
    QVERIFY(page.contains("## Perplexity"));
    QVERIFY(page.contains("| rtn:3 |"));
    QVERIFY(QFile::exists(QDir(dir).filePath(QStringLiteral("perplexity.csv"))));
  }

  void badRequestsAreRefusedWithAReason() {
    MainWindow w;
    openDemo(w);
    PerplexityRequest request = w.perplexityPanel()->request();
    request.quickSpecs = {QStringLiteral("rtn3")};
    w.perplexityPanel()->setRequest(request);
    QCOMPARE(w.perplexityPanel()->run(), 0);
    QVERIFY(w.perplexityPanel()->statusLine()->text().contains(QStringLiteral("'rtn3'")));
    QTemporaryDir tmp;
    w.frequencyPanel()->setTextFile(tmp.filePath(QStringLiteral("missing.txt")));
    const int job = w.frequencyPanel()->run();
    QCOMPARE(waitFor(*w.session(), job), JobState::Failed);
    QTRY_VERIFY(w.frequencyPanel()->statusLine()->text().contains(QStringLiteral("missing.txt")));
    QVERIFY(!w.session()->frequencyRecord());
    QVERIFY(w.frequencyPanel()->runButton()->isEnabled());
  }

  void cancelledEngineJobsLeaveTheViewsIdleWithNoResult() {
    MainWindow w;
    openDemo(w);
    QVERIFY(!EngineJobs::demoTextPath().isEmpty());
    // Every window of the demo text: long enough to be cancelled mid-way.
    PerplexityRequest request = w.perplexityPanel()->request();
    request.textFile = EngineJobs::demoTextPath();
    request.maxWindows = 0;
    request.quickSpecs.clear();
    w.perplexityPanel()->setRequest(request);
    const int job = w.perplexityPanel()->run();
    QVERIFY(job > 0);
    QTRY_VERIFY_WITH_TIMEOUT(w.session()->jobs()->job(job)->fraction > 0.0, 60000);
    QVERIFY(w.perplexityPanel()->cancelButton()->isEnabled());
    w.perplexityPanel()->cancelButton()->click();
    QCOMPARE(waitFor(*w.session(), job), JobState::Cancelled);
    QVERIFY(!w.session()->jobs()->busy());
    QCOMPARE(w.session()->engine()->runningJob(EngineJobs::Kind::Perplexity), 0);
    QVERIFY(w.session()->engine()->perplexityRows().empty());
    QCOMPARE(w.perplexityPanel()->table()->rowCount(), 0);
    QVERIFY(w.perplexityPanel()->runButton()->isEnabled());
    QVERIFY(!w.perplexityPanel()->cancelButton()->isEnabled());

    // The same for the frequency job, cancelled from the status bar's Cancel like any job.
    w.frequencyPanel()->setTextFile(EngineJobs::demoTextPath());
    w.frequencyPanel()->setWindows(256, 0);
    const int freq = w.frequencyPanel()->run();
    QTRY_VERIFY_WITH_TIMEOUT(w.session()->jobs()->job(freq)->fraction > 0.0, 60000);
    auto* statusCancel = w.findChild<QPushButton*>(QStringLiteral("statusCancel"));
    QVERIFY(statusCancel);
    statusCancel->click();
    QCOMPARE(waitFor(*w.session(), freq), JobState::Cancelled);
    QVERIFY(!w.session()->frequencyRecord());
    QVERIFY(w.frequencyPanel()->view()->data().empty());
    QVERIFY(!w.session()->jobs()->busy());
    QVERIFY(w.frequencyPanel()->runButton()->isEnabled());

    // A second request of a kind supersedes the first: the first is cancelled, only the second counts.
    QTemporaryDir tmp;
    const QString text = writeSmallText(tmp);
    w.frequencyPanel()->setWindows(256, 0);
    const int stale = w.frequencyPanel()->run();
    w.frequencyPanel()->setTextFile(text);
    w.frequencyPanel()->setWindows(64, 1);
    const int fresh = w.frequencyPanel()->run();
    QCOMPARE(waitFor(*w.session(), fresh), JobState::Done);
    QCOMPARE(w.session()->jobs()->job(stale)->state, JobState::Cancelled);
    QVERIFY(w.session()->frequencyRecord());
    QCOMPARE(w.session()->frequencyRecord()->frequency.tokens, int64_t(64));
  }

  void gpuPanelSaysWhyItCannotRun() {
    MainWindow w;
    GpuBenchPanel* panel = w.gpuBenchPanel();
    QTRY_VERIFY_WITH_TIMEOUT(panel->availability().has_value(), 60000);
    if (panel->availability()->deviceUsable)
      QSKIP("a usable CUDA GPU is present: the no-GPU message does not apply");
    QVERIFY(!panel->runButton()->isEnabled());
    const QString text = panel->availabilityText();
    QVERIFY2(text.contains(QStringLiteral("CUDA")), qPrintable(text));
    QCOMPARE(panel->findChild<QLabel*>(QStringLiteral("gpuAvailability"))->text(), text);
    QCOMPARE(panel->run(), 0);
    QVERIFY(!w.session()->jobs()->busy());
    QCOMPARE(panel->table()->rowCount(), 0);
    QVERIFY(w.showView(QStringLiteral("gpu-bench")));
    QCOMPARE(w.currentViewName(), QStringLiteral("gpu-bench"));
  }

  // The open model's matrix shapes are offered beside the defaults, unchecked, and a checked one is timed
  // with its label (no GPU needed: settings() is what a run would get).
  void gpuPanelOffersTheModelsShapes() {
    MainWindow w;
    openDemo(w);
    GpuBenchPanel* panel = w.gpuBenchPanel();
    QListWidget* list = panel->shapeList();
    const GpuGemmSettings before = panel->settings();
    QCOMPARE(before.shapes, defaultGemmShapes());  // only the defaults are checked
    QVERIFY(before.shapeLabels.empty());
    QListWidgetItem* down = nullptr;
    int from_model = 0;
    for (int i = 0; i < list->count(); ++i) {
      QListWidgetItem* item = list->item(i);
      if (!item->text().contains(QStringLiteral("—"))) continue;
      ++from_model;
      QCOMPARE(item->checkState(), Qt::Unchecked);
      QVERIFY2(item->flags() & Qt::ItemIsEnabled, qPrintable(item->text()));  // all multiples of 64
      if (item->text().startsWith(QStringLiteral("256 × 512"))) down = item;
    }
    QCOMPARE(from_model, 4);  // q/o, k/v, expert gate/up, expert down
    QVERIFY(down);
    QVERIFY2(down->text().contains(QStringLiteral("expert down ×32")), qPrintable(down->text()));
    QVERIFY2(down->toolTip().contains(QStringLiteral("32 of the open model's matrices")), qPrintable(down->toolTip()));
    down->setCheckState(Qt::Checked);
    const GpuGemmSettings after = panel->settings();
    QCOMPARE(after.shapes.size(), before.shapes.size() + 1);
    QCOMPARE(after.shapes.back(), (std::pair<int64_t, int64_t>(256, 512)));
    QCOMPARE(after.shapeLabels.size(), after.shapes.size());
    QCOMPARE(QString::fromStdString(after.shapeLabels.back()), QStringLiteral("expert down ×32"));
    QVERIFY(after.shapeLabels.front().empty());
  }

  void viewNamesRoundTrip() {
    MainWindow w;
    for (const QString& name : MainWindow::viewNames()) {
      QVERIFY2(w.showView(name), qPrintable(name));
      QCOMPARE(w.currentViewName(), name);
    }
  }
};

QTEST_MAIN(TestEngineViews)
#include "tst_engine_views.moc"

// SPDX-License-Identifier: MIT
// Item models of the workbench under QAbstractItemModelTester: the tensor table (filled in stages as the
// statistics arrive), its filter proxy with the shared filter language, the job list, and the heatmap
// layout of the demo model.
#include <QAbstractItemModelTester>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>
#include <set>

#include "gui_test_support.h"
#include "jobs/job_list_model.h"
#include "jobs/job_runner.h"
#include "models/expert_frequency_record.h"
#include "models/heatmap_layout.h"
#include "models/tensor_filter_proxy.h"
#include "models/tensor_table_model.h"
#include "moewb/checkpoint.h"
#include "moewb/error.h"
#include "moewb/quant/rank_policy.h"

using namespace moewb;
using namespace moewb::gui;

class TestItemModels : public QObject {
  Q_OBJECT
  std::shared_ptr<const ModelCatalog> catalog_;
  ModelStats stats_;

 private slots:
  void initTestCase() {
    catalog_ = std::make_shared<const ModelCatalog>(Checkpoint::open(test::demoModel().toStdString()));
    stats_ = computeModelStats(*catalog_);
    QVERIFY(stats_.rows.size() > catalog_->matrices().size());  // norms etc. follow the matrices
  }

  void tensorTableFillsInStages() {
    TensorTableModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setCatalog(catalog_);
    const int matrices = int(catalog_->matrices().size());
    QCOMPARE(model.rowCount(), matrices);
    QVERIFY(!model.index(0, TensorTableModel::Kurtosis).data().isValid());  // not known yet
    for (std::size_t i = 0; i < 5; ++i) model.setStatsRow(i, stats_.rows[i]);
    QVERIFY(model.hasStats(4) && !model.hasStats(5));
    QCOMPARE(model.index(3, TensorTableModel::Kurtosis).data(TensorTableModel::SortRole).toDouble(),
             stats_.rows[3].stats.kurtosis);
    model.setStats(stats_);
    QCOMPARE(model.rowCount(), int(stats_.rows.size()));
    QCOMPARE(model.index(matrices, 0).data(TensorTableModel::MatrixIndexRole).toLongLong(), -1);
    std::vector<int> ranks(catalog_->matrices().size(), 16);
    model.setRanks(ranks);
    QCOMPARE(model.index(0, TensorTableModel::Rank).data().toInt(), 16);
    model.setRelativeError(2, 0.125);
    QCOMPARE(model.index(2, TensorTableModel::RelError).data(TensorTableModel::SortRole).toDouble(), 0.125);
    model.clearRelativeErrors();
    QVERIFY(!model.index(2, TensorTableModel::RelError).data().isValid());
    model.setCatalog(nullptr);
    QCOMPARE(model.rowCount(), 0);
  }

  void filterProxyAgreesWithTheCoreFilter() {
    TensorTableModel model;
    model.setCatalog(catalog_);
    TensorFilterProxy proxy;
    proxy.setSourceModel(&model);
    QAbstractItemModelTester tester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
    for (const char* expr :
         {"layer:3 block:expert", "proj:down,up", "name:self_attn", "!block:expert", "expert:0-3 layer:1"}) {
      QString error;
      QVERIFY2(proxy.setFilterExpression(QString::fromLatin1(expr), &error), qPrintable(error));
      const TensorFilter filter = TensorFilter::parse(expr);
      int expected = 0;
      for (const WeightMatrix& m : catalog_->matrices())
        expected += filter.matches(makeRowFields(*catalog_, m));
      QCOMPARE(proxy.rowCount(), expected);
      QVERIFY(expected > 0);
    }
    QVERIFY(proxy.setFilterExpression(QStringLiteral("layer:3 block:expert")));
    QCOMPARE(proxy.rowCount(), 24);  // 8 experts × w1/w2/w3
  }

  void statisticTermsMatchOnlyOnceStatisticsArrive() {
    TensorTableModel model;
    model.setCatalog(catalog_);
    TensorFilterProxy proxy;
    proxy.setSourceModel(&model);
    QAbstractItemModelTester tester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QVERIFY(proxy.setFilterExpression(QStringLiteral("kurtosis>0.3")));
    QCOMPARE(proxy.rowCount(), 0);
    model.setStats(stats_);
    int expected = 0;
    for (std::size_t i = 0; i < stats_.rows.size(); ++i) expected += stats_.rows[i].stats.kurtosis > 0.3;
    QVERIFY(expected > 0);
    QCOMPARE(proxy.rowCount(), expected);
  }

  void badFilterKeepsThePreviousOneAndSaysWhy() {
    TensorTableModel model;
    model.setCatalog(catalog_);
    TensorFilterProxy proxy;
    proxy.setSourceModel(&model);
    QVERIFY(proxy.setFilterExpression(QStringLiteral("layer:0")));
    const int rows = proxy.rowCount();
    QString error;
    QVERIFY(!proxy.setFilterExpression(QStringLiteral("layer:zero"), &error));
    QVERIFY(!error.isEmpty());
    QCOMPARE(proxy.rowCount(), rows);
  }

  void sortingIsNumeric() {
    TensorTableModel model;
    model.setCatalog(catalog_);
    model.setStats(stats_);
    TensorFilterProxy proxy;
    proxy.setSourceModel(&model);
    proxy.sort(TensorTableModel::Kurtosis, Qt::DescendingOrder);
    for (int r = 1; r < proxy.rowCount(); ++r)
      QVERIFY(proxy.index(r - 1, TensorTableModel::Kurtosis).data(TensorTableModel::SortRole).toDouble() >=
              proxy.index(r, TensorTableModel::Kurtosis).data(TensorTableModel::SortRole).toDouble());
  }

  void jobListTracksQueueAndHistory() {
    JobRunner runner;
    JobListModel model(&runner);
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy finished(&runner, &JobRunner::jobFinished);
    runner.submit(QStringLiteral("first"), [](const ProgressFn& p) { p(0.5, "half"); });
    const int failing =
        runner.submit(QStringLiteral("second"), [](const ProgressFn&) { throw Error("bad tensor x"); });
    QCOMPARE(model.rowCount(), 2);
    QTRY_COMPARE(finished.count(), 2);
    QCOMPARE(model.index(0, JobListModel::Title).data().toString(),
             QStringLiteral("second"));  // newest first
    QCOMPARE(runner.job(failing)->state, JobState::Failed);
    QCOMPARE(model.index(0, JobListModel::Message).data().toString(), QStringLiteral("bad tensor x"));
    QCOMPARE(model.index(1, JobListModel::State).data().toString(), jobStateName(JobState::Done));
  }

  void heatmapLayoutPlacesEveryLayerMatrixOnce() {
    const HeatmapLayout layout = buildHeatmapLayout(*catalog_);
    QCOMPARE(layout.rows(), 4);
    QCOMPARE(layout.columnLabels.first(), QStringLiteral("attn"));
    QCOMPARE(layout.columns(), 1 + 8);
    std::set<std::size_t> seen;
    for (const auto& cell : layout.cellMatrices)
      for (std::size_t m : cell) QVERIFY(seen.insert(m).second);
    std::size_t expected = 0;
    for (const WeightMatrix& m : catalog_->matrices()) {
      const TensorClass& c = catalog_->classOf(m.tensor);
      expected += c.layer >= 0 && (c.block == Block::Attention || c.block == Block::Expert);
    }
    QCOMPARE(seen.size(), expected);
    QCOMPARE(layout.matricesAt(2, 1 + 5).size(), std::size_t(3));  // layer 2, expert 5: w1, w2, w3
  }

  void heatmapCellsAggregateTheirTensors() {
    const HeatmapLayout layout = buildHeatmapLayout(*catalog_);
    std::vector<double> perMatrix(catalog_->matrices().size());
    for (std::size_t i = 0; i < perMatrix.size(); ++i) perMatrix[i] = double(i);
    const auto& cell = layout.matricesAt(1, 3);
    // Tail metrics take the worst tensor of a cell, the others the mean.
    const HeatmapData kurt = fillHeatmap(*catalog_, layout, HeatmapMetric::Kurtosis, perMatrix);
    QCOMPARE(kurt.value(1, 3), float(*std::max_element(cell.begin(), cell.end())));
    const HeatmapData err = fillHeatmap(*catalog_, layout, HeatmapMetric::RelativeError, perMatrix);
    double mean = 0;
    for (std::size_t m : cell) mean += double(m) / double(cell.size());
    QCOMPARE(err.value(1, 3), float(mean));
    QVERIFY(err.cellName(1, 3).contains(QString::fromStdString(catalog_->matrices()[cell.front()].name)));
    // Frequencies exist for routed experts only.
    std::vector<std::vector<double>> freq(4, std::vector<double>(8, 0.125));
    freq[1][2] = 0.5;
    const HeatmapData f = fillHeatmap(*catalog_, layout, HeatmapMetric::ExpertFrequency, perMatrix, &freq);
    QCOMPARE(f.value(1, 1 + 2), 0.5f);
    QVERIFY(std::isnan(f.value(1, 0)));  // attention column
  }

  // Guards: the GUI's frequency record reads a `moewb freq` file with the core's parser, so the view and
  // the rank policies (`moewb quantize --frequencies`) see the same counts, and a malformed file gives
  // the core's message naming the file and what was expected.
  void frequencyRecordReadsWhatTheCoreReads() {
    QTemporaryDir tmp;
    auto write = [&](const QString& name, const QByteArray& text) {
      QFile f(tmp.filePath(name));
      if (!f.open(QIODevice::WriteOnly)) return QString();
      f.write(text);
      return f.fileName();
    };
    const QString files[] = {
        write(QStringLiteral("f.json"),
              R"({"tokens":10,"top_k":2,"model":"/m","seq_len":5,)"
              R"("layers":[{"layer":1,"counts":[7,3,0,10]},{"layer":3,"counts":[5,5,5,5]}]})"),
        // Hand-made: three columns, layers interleaved, an expert left out.
        write(QStringLiteral("f.csv"),
              "layer,expert,count\n3,0,5\n1,0,7\n1,1,3\n3,1,5\n1,3,10\n3,2,5\n3,3,5\n"),
    };
    for (const QString& file : files) {
      QVERIFY(!file.isEmpty());
      const ExpertFrequencyRecord record = loadExpertFrequencyRecord(file);
      const quant::ExpertFrequencies policy = quant::ExpertFrequencies::load(file.toStdString());
      const engine::ExpertFrequencyFile core = engine::loadExpertFrequencyFile(file.toStdString());
      QCOMPARE(record.frequency.layers.size(), core.frequency.layers.size());
      QCOMPARE(record.frequency.tokens, core.frequency.tokens);
      QCOMPARE(record.seqLen, core.seq_len);
      QCOMPARE(record.model.toStdString(), core.model);
      QCOMPARE(record.toPolicyFrequencies().counts, policy.counts);
      QCOMPARE(policy.counts.at(1), (std::vector<double>{7, 3, 0, 10}));
      QCOMPARE(policy.counts.at(3), (std::vector<double>{5, 5, 5, 5}));
      // What the record writes back is the core's writer's text, and it reads back the same.
      QCOMPARE(record.toJson(), core.toJson().dump(2) + "\n");
    }
    const QString bad = write(QStringLiteral("bad.csv"), "layer,expert,count\n0,1,2\n0,x,3\n");
    QString recordError, coreError;
    try {
      loadExpertFrequencyRecord(bad);
    } catch (const Error& e) {
      recordError = QString::fromUtf8(e.what());
    }
    try {
      quant::ExpertFrequencies::load(bad.toStdString());
    } catch (const Error& e) {
      coreError = QString::fromUtf8(e.what());
    }
    QVERIFY2(recordError.startsWith(bad + QStringLiteral(":3: expected 'layer,expert,count")),
             qPrintable(recordError));
    QCOMPARE(recordError, coreError);
  }
};

QTEST_MAIN(TestItemModels)
#include "tst_item_models.moc"

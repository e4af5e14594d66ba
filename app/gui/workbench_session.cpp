// SPDX-License-Identifier: MIT
#include "workbench_session.h"

#include <QDateTime>
#include <QPointer>
#include <algorithm>
#include <atomic>
#include <iterator>

#include "engine_jobs.h"
#include "quant_device_choice.h"
#include "models/tensor_table_model.h"
#include "moewb/checkpoint.h"
#include "moewb/error.h"
#include "moewb/jobs/quantize_job.h"
#include "moewb/methods/registry.h"
#include "moewb/parallel.h"
#include "moewb/quant/grouped_quant.h"
#include "moewb/quant/milo.h"
#include "moewb/quant/model_quantizer.h"
#include "engine_device_choice.h"

namespace moewb::gui {

WorkbenchSession::WorkbenchSession(QObject* parent)
    : QObject(parent), jobs_(new JobRunner(this)), tensorModel_(new TensorTableModel(this)) {
  qRegisterMetaType<std::size_t>("std::size_t");
  engine_ = new EngineJobs(this);
  connect(jobs_, &JobRunner::jobFinished, this, &WorkbenchSession::onJobFinished);
}

void WorkbenchSession::onJobFinished(int id, JobState state) {
  if (id == 0 || id != quantJob_) return;
  quantJob_ = 0;
  if (state == JobState::Done) {
    quantization_ = std::move(runningQuantization_);
    double sum = 0;
    for (const auto& [m, r] : pending_) sum += r.relError;
    if (!pending_.empty())
      jobs_->setMessage(
          id, tr("%1 tensors, mean relative error %2%3")
                  .arg(pending_.size())
                  .arg(sum / double(pending_.size()), 0, 'f', 5)
                  .arg(quantization_ ? tr(", %1 MB → %2 MB")
                                           .arg(double(quantization_->original_bytes) / 1e6, 0, 'f', 1)
                                           .arg(double(quantization_->compressed_bytes) / 1e6, 0, 'f', 1)
                                     : QString()));
    setResults(std::move(pending_), runningSettings_);
  } else {
    // Cancelled or failed: nothing of the run remains; the table shows the last completed results again.
    runningQuantization_.reset();
    setResults(results_, resultSettings_);
  }
  pending_.clear();
  emit quantizationFinished(state);
}

WorkbenchSession::~WorkbenchSession() {
  // The runner's destructor waits for the running job; cancel first so that is quick.
  jobs_->cancelAll();
  // Destroy the runner (it waits for the running job) while the members its work touches still exist.
  delete jobs_;
  jobs_ = nullptr;
}

void WorkbenchSession::cancelAll() {
  jobs_->cancelAll();
}

void WorkbenchSession::open(const QString& path) {
  const int generation = ++generation_;
  jobs_->cancelAll();  // whatever ran for the previous model is stale now
  quantJob_ = 0;
  statsJob_ = 0;
  pending_.clear();
  openStartedMs_ = QDateTime::currentMSecsSinceEpoch();
  const std::string file = path.toStdString();
  QPointer<WorkbenchSession> self(this);
  jobs_->submit(tr("Open %1").arg(path), [self, file, generation](const ProgressFn& progress) {
    progress(0.0, "reading headers");
    QElapsedTimer timer;
    timer.start();
    std::shared_ptr<const ModelCatalog> catalog;
    try {
      catalog = std::make_shared<const ModelCatalog>(Checkpoint::open(file));
    } catch (const std::exception& e) {
      const QString message = QString::fromUtf8(e.what());
      QMetaObject::invokeMethod(
          self.data(),
          [self, generation, message] {
            if (self && self->generation_ == generation) emit self->openFailed(message);
          },
          Qt::QueuedConnection);
      throw;
    }
    const double seconds = timer.elapsed() / 1000.0;
    QMetaObject::invokeMethod(
        self.data(),
        [self, generation, catalog, seconds] {
          if (self) self->onModelOpened(generation, catalog, seconds);
        },
        Qt::QueuedConnection);
    progress(1.0, "headers read");
  });
  modelPath_ = path;
}

void WorkbenchSession::onModelOpened(int generation, std::shared_ptr<const ModelCatalog> catalog, double) {
  if (generation != generation_) return;  // a newer open() superseded this one
  catalog_ = std::move(catalog);
  stats_ = ModelStats{};
  statsComplete_ = false;
  results_.clear();
  pending_.clear();
  quantization_.reset();
  frequencyRecord_.reset();
  frequencies_.reset();
  policyEvaluation_.reset();
  tensorAnalysis_.reset();
  ranks_.assign(catalog_->matrices().size(), -1);
  tensorModel_->setCatalog(catalog_);
  secondsToSummary_ = (QDateTime::currentMSecsSinceEpoch() - openStartedMs_) / 1000.0;
  emit modelOpened();
  emit resultsChanged();
  startStats();
}

void WorkbenchSession::setPolicy(const PolicyState& state, const PolicyEvaluation& evaluation) {
  policyState_ = state;
  policyEvaluation_ = evaluation;
}

void WorkbenchSession::setTensorAnalysis(TensorAnalysis analysis) {
  tensorAnalysis_ = std::move(analysis);
}

void WorkbenchSession::startStats() {
  const int generation = generation_;
  auto catalog = catalog_;
  QPointer<WorkbenchSession> self(this);
  statsJob_ = jobs_->submit(tr("Statistics"), [self, catalog, generation, this](const ProgressFn& progress) {
    StatsOptions options;
    auto onRow = [self, generation, this](std::size_t index, const StatsRow& row) {
      // Runs on a worker; `this` is only touched under the mutex and through a queued flush (the runner
      // waits for this job before the session can be destroyed).
      std::lock_guard lock(rowsMutex_);
      rowsInFlight_.emplace_back(index, row);
      if (flushPending_) return;
      flushPending_ = true;
      QMetaObject::invokeMethod(
          self.data(),
          [self, generation] {
            if (self) self->flushStatsRows(generation);
          },
          Qt::QueuedConnection);
    };
    auto stats =
        std::make_shared<ModelStats>(loadOrComputeModelStats(*catalog, options, progress, true, onRow));
    QMetaObject::invokeMethod(
        self.data(),
        [self, generation, stats] {
          if (!self || self->generation_ != generation) return;
          self->flushStatsRows(generation);
          self->stats_ = std::move(*stats);
          self->statsComplete_ = true;
          self->tensorModel_->setStats(self->stats_);
          self->secondsToStats_ = (QDateTime::currentMSecsSinceEpoch() - self->openStartedMs_) / 1000.0;
          emit self->statsFinished();
        },
        Qt::QueuedConnection);
  });
}

void WorkbenchSession::flushStatsRows(int generation) {
  std::vector<std::pair<std::size_t, StatsRow>> rows;
  {
    std::lock_guard lock(rowsMutex_);
    rows.swap(rowsInFlight_);
    flushPending_ = false;
  }
  if (generation != generation_) return;
  for (const auto& [index, row] : rows) tensorModel_->setStatsRow(index, row);
  if (!rows.empty()) emit statsRowsArrived();
}

const TensorStats* WorkbenchSession::matrixStats(std::size_t matrix) const {
  if (int(matrix) >= tensorModel_->rowCount() || !tensorModel_->hasStats(int(matrix))) return nullptr;
  return &tensorModel_->statsRow(int(matrix)).stats;
}

void WorkbenchSession::setRanks(std::vector<int> ranks) {
  ranks_ = std::move(ranks);
  tensorModel_->setRanks(ranks_);
  emit ranksChanged();
}

void WorkbenchSession::setResults(std::map<std::size_t, MatrixResult> results,
                                  const QuantSettings& settings) {
  results_ = std::move(results);
  resultSettings_ = settings;
  tensorModel_->clearRelativeErrors();
  for (const auto& [m, r] : results_) tensorModel_->setRelativeError(m, r.relError);
  emit resultsChanged();
}

int WorkbenchSession::startQuantization(const QuantSettings& settings, std::vector<std::size_t> matrices,
                                        const QString& policyText) {
  if (!catalog_ || quantJob_) return 0;
  // Only what the core quantizes (attention, MLPs, experts); a table filter may have selected others.
  const std::vector<std::size_t> quantizable = quant::quantizableMatrices(*catalog_);
  if (matrices.empty()) {
    matrices = quantizable;
  } else {
    std::vector<std::size_t> kept;
    std::set_intersection(matrices.begin(), matrices.end(), quantizable.begin(), quantizable.end(),
                          std::back_inserter(kept));
    matrices = std::move(kept);
  }
  if (matrices.empty()) return 0;
  std::vector<int> ranks;
  for (std::size_t m : matrices) ranks.push_back(m < ranks_.size() ? std::max(0, ranks_[m]) : 0);
  const int generation = generation_;
  auto catalog = catalog_;
  pending_.clear();
  runningSettings_ = settings;
  runningQuantization_.reset();
  // Settings are checked inside the job, so an unknown method or a bad value in a project file ends as a
  // failed job with its message rather than an exception in the GUI thread.
  const methods::WeightMethod* method = methods::MethodRegistry::instance().find(settings.method.toStdString());
  const std::string policy = method && method->usesRankPolicy() ? policyText.toStdString() : std::string();
  QPointer<WorkbenchSession> self(this);
  const QString title = tr("%1 on %n tensor(s)", nullptr, int(matrices.size())).arg(settings.describe());
  const quant::ComputeDevice device = settings.computeDevice();
  quantJob_ = jobs_->submit(
      title, [self, catalog, ranks, settings, matrices, generation, policy, device](const ProgressFn& progress) {
        const quant::QuantizeSettings core = toCoreSettings(settings);
        // The same backend choice as `moewb quantize --device`: batched GPU quantization when asked for
        // (or auto) and available, else the CPU, saying so as the job's first stage when CUDA was asked for.
        std::string note;
        const std::unique_ptr<quant::BatchBackend> backend = app::quantBackendForDevice(device, &note);
        if (!note.empty() && progress && !progress(0.0, note)) throw moewb::Cancelled();
        // The same request `moewb quantize` runs, with the matrices the table chose and the policy editor's
        // ranks.
        jobs::QuantizeRequest request;
        request.catalog = catalog;
        request.settings = core;
        request.matrices = matrices;
        request.ranks = ranks;
        request.policy = policy;
        request.pipeline.backend = backend.get();
        // The calibration passes (GPTQ, QMoE) run on the GPU engine where the quantizer runs on the GPU.
        request.calibration_backend = backend ? app::sharedGpuEngine() : nullptr;
        // Every MiLo iteration feeds the live convergence plot.
        auto onIteration = [self, generation, catalog](std::size_t matrix, int iteration, double error) {
          const QString tensor = QString::fromStdString(catalog->matrices().at(matrix).name);
          QMetaObject::invokeMethod(
              self.data(),
              [self, generation, tensor, iteration, error] {
                if (self && self->generation_ == generation && self->quantJob_)
                  emit self->convergencePoint(tensor, iteration, error);
              },
              Qt::QueuedConnection);
        };
        auto onMatrix = [self, generation](const quant::QuantizedMatrix& q) {
          MatrixResult result;
          result.relError = q.rel_error;
          result.rank = q.rank;
          result.curve = q.curve;
          const std::size_t m = q.matrix;
          QMetaObject::invokeMethod(
              self.data(),
              [self, generation, m, result] {
                if (!self || self->generation_ != generation || !self->quantJob_) return;
                self->pending_[m] = result;
                self->tensorModel_->setRelativeError(m, result.relError);
                emit self->resultArrived(m);
              },
              Qt::QueuedConnection);
        };
        request.on_matrix_done = onMatrix;
        request.on_iteration = onIteration;
        auto result =
            std::make_shared<quant::ModelQuantization>(jobs::runQuantizeJob(request, progress).quantization);
        QMetaObject::invokeMethod(
            self.data(),
            [self, generation, result] {
              if (self && self->generation_ == generation) self->runningQuantization_ = result;
            },
            Qt::QueuedConnection);
      });
  emit quantizationStarted(quantJob_);
  return quantJob_;
}

void WorkbenchSession::setExpertFrequencies(std::optional<ExpertFrequencyRecord> record) {
  frequencyRecord_ = std::move(record);
  if (frequencyRecord_)
    frequencies_ = frequencyRecord_->toPolicyFrequencies();
  else
    frequencies_.reset();
  emit frequenciesChanged();
}

int WorkbenchSession::measureExpertFrequencies(const QString& textFile, int maxWindows) {
  FrequencyRequest request;
  request.textFile = textFile;
  request.maxWindows = maxWindows;
  return engine_->measureFrequencies(request);
}

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#pragma once
#include <QObject>
#include <QString>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "jobs/job_runner.h"
#include "models/expert_frequency_record.h"
#include "moewb/catalog.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/stats.h"
#include "policy/policy_state.h"
#include "quant_settings.h"
#include "tensor_analysis.h"

namespace moewb::gui {
class TensorTableModel;
class EngineJobs;

// Result of quantizing one matrix in a run.
struct MatrixResult {
  double relError = std::numeric_limits<double>::quiet_NaN();
  int rank = 0;
  std::vector<double> curve;  // MiLo ε_t per iteration
};

// The document behind the window: which model is open, its statistics, the rank policy state, the results
// of the last completed quantization run, and the jobs that produce them. Views read it and listen to its
// signals; all mutation happens on the GUI thread (workers post results back by queued calls).
//
// Every open() starts a new generation: jobs of an older generation are cancelled and whatever they still
// post is dropped, so a slow statistics job of the previous model can never fill the new model's table.
class WorkbenchSession : public QObject {
  Q_OBJECT
 public:
  explicit WorkbenchSession(QObject* parent = nullptr);
  ~WorkbenchSession() override;

  JobRunner* jobs() const { return jobs_; }
  // Engine measurements (expert frequency, K/V capture, perplexity) run on the same runner.
  EngineJobs* engine() const { return engine_; }
  TensorTableModel* tensorModel() const { return tensorModel_; }

  // Opens a checkpoint in the background; modelOpened() then statsProgress()/statsComplete() follow.
  void open(const QString& path);
  QString modelPath() const { return modelPath_; }
  std::shared_ptr<const ModelCatalog> catalog() const { return catalog_; }
  bool statsComplete() const { return statsComplete_; }
  const ModelStats* stats() const { return statsComplete_ ? &stats_ : nullptr; }
  // Statistics of matrix i when already known (during computation some are).
  const TensorStats* matrixStats(std::size_t matrix) const;
  int generation() const { return generation_; }
  // Seconds from open() to the summary / to complete statistics (for the status bar and acceptance checks).
  double secondsToSummary() const { return secondsToSummary_; }
  double secondsToStats() const { return secondsToStats_; }
  int statsJob() const { return statsJob_; }

  // Ranks (per catalog matrix) chosen by the policy editor; quantization runs use them for MiLo.
  void setRanks(std::vector<int> ranks);
  const std::vector<int>& ranks() const { return ranks_; }

  // The rank policy as the editor holds it and its last evaluation (totals), for the report (which needs
  // no window); policyEvaluation() is null until an evaluation arrived for this model.
  void setPolicy(const PolicyState& state, const PolicyEvaluation& evaluation);
  const PolicyState& policyState() const { return policyState_; }
  const PolicyEvaluation* policyEvaluation() const {
    return policyEvaluation_ ? &*policyEvaluation_ : nullptr;
  }

  // The last completed in-depth analysis of one tensor (the inspector's job), of analysis->matrix; null
  // until one completed for this model.
  void setTensorAnalysis(TensorAnalysis analysis);
  const TensorAnalysis* tensorAnalysis() const { return tensorAnalysis_ ? &*tensorAnalysis_ : nullptr; }

  // Quantization runs. Results stream in (resultArrived) while the run is going; they become the
  // session's results only when the run completes. A cancelled or failed run is discarded entirely.
  // `matrices`: sorted catalog indices (empty: every quantizable matrix); `policyText` is recorded in the
  // export manifest. Uses the core's quantizeModel, the same code as `moewb quantize`.
  int startQuantization(const QuantSettings& settings, std::vector<std::size_t> matrices = {},
                        const QString& policyText = {});
  bool quantizationRunning() const { return quantJob_ != 0; }
  int quantizationJob() const { return quantJob_; }
  const std::map<std::size_t, MatrixResult>& results() const { return results_; }
  const std::map<std::size_t, MatrixResult>& pendingResults() const { return pending_; }
  const QuantSettings& resultSettings() const { return resultSettings_; }
  void setResults(std::map<std::size_t, MatrixResult> results, const QuantSettings& settings);
  // The last completed run as the core produced it (what an export writes); null after reopening a
  // project, whose results are numbers only.
  std::shared_ptr<const quant::ModelQuantization> quantization() const { return quantization_; }
  void cancelAll();

  // Expert activation frequencies (frequency view, heatmap metric, frequency-R policies): loaded from
  // `moewb freq --json` / `--csv` output, or measured by the engine over a text in the background
  // (EngineJobs::measureFrequencies). The record keeps tokens and top-k; policies read the counts.
  const ExpertFrequencyRecord* frequencyRecord() const {
    return frequencyRecord_ ? &*frequencyRecord_ : nullptr;
  }
  const quant::ExpertFrequencies* expertFrequencies() const {
    return frequencies_ ? &*frequencies_ : nullptr;
  }
  void setExpertFrequencies(std::optional<ExpertFrequencyRecord> record);
  // Shortcut for EngineJobs::measureFrequencies with the CLI's window length (256).
  int measureExpertFrequencies(const QString& textFile, int maxWindows = 64);

 signals:
  void modelOpened();
  void openFailed(const QString& message);
  void statsRowsArrived();  // some rows (batched) were added to the table model
  void statsFinished();
  void resultArrived(std::size_t matrix);  // a pending result (running job)
  void convergencePoint(QString tensor, int iteration, double error);
  void quantizationStarted(int job);
  void quantizationFinished(moewb::gui::JobState state);
  void resultsChanged();  // committed results replaced
  void ranksChanged();
  void frequenciesChanged();

 private:
  void startStats();
  void onJobFinished(int id, JobState state);
  void flushStatsRows(int generation);
  void onModelOpened(int generation, std::shared_ptr<const ModelCatalog> catalog, double seconds);

  JobRunner* jobs_;
  TensorTableModel* tensorModel_;
  QString modelPath_;
  std::shared_ptr<const ModelCatalog> catalog_;
  int generation_ = 0;
  ModelStats stats_;
  bool statsComplete_ = false;
  int statsJob_ = 0;
  double secondsToSummary_ = 0, secondsToStats_ = 0;
  qint64 openStartedMs_ = 0;

  // Rows computed by the worker and not yet handed to the GUI thread: one queued flush drains them all,
  // so a 40k-tensor model does not post 40k events.
  std::mutex rowsMutex_;
  std::vector<std::pair<std::size_t, StatsRow>> rowsInFlight_;
  bool flushPending_ = false;

  std::vector<int> ranks_;
  PolicyState policyState_;
  std::optional<PolicyEvaluation> policyEvaluation_;
  std::optional<TensorAnalysis> tensorAnalysis_;
  std::optional<ExpertFrequencyRecord> frequencyRecord_;
  std::optional<quant::ExpertFrequencies> frequencies_;  // the record's counts, as policies read them
  EngineJobs* engine_;
  int quantJob_ = 0;
  QuantSettings runningSettings_, resultSettings_;
  std::map<std::size_t, MatrixResult> pending_, results_;
  std::shared_ptr<const quant::ModelQuantization> quantization_, runningQuantization_;
};

}  // namespace moewb::gui

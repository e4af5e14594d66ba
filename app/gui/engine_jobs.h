// SPDX-License-Identifier: MIT
#pragma once
#include <QObject>
#include <QString>
#include <QStringList>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "jobs/job_runner.h"
#include "models/expert_frequency_record.h"
#include "models/perplexity_table_model.h"
#include "moewb/engine/kv_capture.h"
#include "moewb/jobs/generate_job.h"

namespace moewb::gui {
class WorkbenchSession;

// `moewb freq`: route a text through the model and count expert choices.
struct FrequencyRequest {
  QString textFile;
  int seqLen = 256;
  int maxWindows = 16;  // 0: every window of the text
};

// `moewb kv --prompt TEXT`: K/V cache and attention of one prompt.
struct KvCaptureRequest {
  QString prompt;
  int maxTokens = 128;
  int firstTokens = 4;  // keys counted as "first tokens" (attention sinks)
};

// `moewb eval`: perplexity of the original and of compressed variants on one text.
struct PerplexityRequest {
  QString textFile;
  int seqLen = 256;
  int maxWindows = 4;  // 0: every window
  int64_t batchTokens = 8192;
  bool original = true;
  bool lastRun = false;       // the session's last completed quantization, in memory
  QStringList exportFolders;  // loadReplacementCheckpoint (`moewb eval --quantized DIR`)
  QStringList quickSpecs;     // quantizeVariant (`moewb eval --quantize rtn:3`)
};

// `moewb generate --prompt TEXT --max-new-tokens N`: the "Try it" box, greedy on the original weights.
struct GenerationRequest {
  QString prompt;
  int maxNewTokens = 32;
};

// The engine measurements of the GUI, run as background jobs on the session's JobRunner: each request
// here becomes the core request `moewb freq`, `kv` and `eval` build (jobs::FreqRequest, KvRequest,
// EvalRequest in core/include/moewb/jobs/) and runs through the same function. A result becomes the
// current one only when its job completes: a cancelled or failed job leaves the previous result, and a
// job of an older model (generation) or one superseded by a newer request of its kind is dropped.
class EngineJobs : public QObject {
  Q_OBJECT
 public:
  enum class Kind { Frequency, KvCapture, Perplexity, Generation };
  Q_ENUM(Kind)

  explicit EngineJobs(WorkbenchSession* session);

  // Each returns the job id, or 0 with `error` set when the request cannot start (no model, bad spec).
  int measureFrequencies(const FrequencyRequest& request, QString* error = nullptr);
  int captureKv(const KvCaptureRequest& request, QString* error = nullptr);
  int openKvCapture(const QString& path, QString* error = nullptr);  // loadKvCapture
  int saveKvCapture(const QString& path, QString* error = nullptr);  // the current capture
  int evaluatePerplexity(const PerplexityRequest& request, QString* error = nullptr);
  int generate(const GenerationRequest& request, QString* error = nullptr);

  int runningJob(Kind kind) const;  // 0 when none of that kind is queued or running
  void cancel(Kind kind);

  std::shared_ptr<const engine::KvCapture> kvCapture() const { return kv_; }
  QString kvSource() const { return kvSource_; }
  // Rows of the last completed perplexity run; while one runs, pendingPerplexityRows() fill up.
  const std::vector<PerplexityRow>& perplexityRows() const { return rows_; }
  const std::vector<PerplexityRow>& pendingPerplexityRows() const { return pendingRows_; }
  const PerplexityRequest& perplexitySettings() const { return rowsRequest_; }  // of perplexityRows()
  // The text of the running generation as it grows, or of the last one (a stopped one keeps what it had).
  QString generatedText() const { return generatedText_; }
  // The last completed generation (ids, speeds, memory); empty while none completed for this model.
  const std::optional<jobs::GenerateJobResult>& generation() const { return generation_; }

  // Default text of the measurements: the bundled resources/demo-text/sample.txt, when it exists.
  static QString demoTextPath();
  // Quick specs are parsed by the one parser in core (moewb/methods/spec.h).
  static QString quickSpecError(const QString& spec);  // "" when the spec parses

 signals:
  void jobStarted(moewb::gui::EngineJobs::Kind kind, int job);
  void jobFinished(moewb::gui::EngineJobs::Kind kind, int job, moewb::gui::JobState state,
                   const QString& message);
  void kvCaptureChanged();
  void perplexityRowArrived();   // a pending row of the running evaluation
  void perplexityRowsChanged();  // the committed rows were replaced (or a cancelled run was dropped)
  void generatedTextChanged();   // a new token arrived (or a new generation started)
  void generationChanged();      // a generation completed: generation() is its result

 private:
  int submit(Kind kind, const QString& title, JobWork work);
  void onJobFinished(int id, JobState state, const QString& message);
  void onModelOpened();
  // From a worker: runs `apply` on the GUI thread if job `*id` of `kind` is still the current one of
  // this model (the id is filled in by submit(), possibly after the work started).
  template <typename F>
  void post(Kind kind, int generation, std::shared_ptr<const int> id, F apply);
  bool current(Kind kind, int generation, int id) const;

  WorkbenchSession* session_;
  std::map<Kind, int> running_;
  std::map<int, Kind> kindOf_;
  std::shared_ptr<const engine::KvCapture> kv_, pendingKv_;
  QString kvSource_, pendingKvSource_;
  std::optional<ExpertFrequencyRecord> pendingFrequency_;
  std::vector<PerplexityRow> rows_, pendingRows_;
  PerplexityRequest rowsRequest_, runningRequest_;
  QString generatedText_;
  std::optional<jobs::GenerateJobResult> generation_, pendingGeneration_;
};

}  // namespace moewb::gui

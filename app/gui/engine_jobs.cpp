// SPDX-License-Identifier: MIT
#include "engine_jobs.h"

#include <QDir>
#include <QFileInfo>
#include <QPointer>
#include <QRegularExpression>
#include <optional>

#include "engine_device_choice.h"
#include "moewb/demo_model.h"
#include "moewb/error.h"
#include "moewb/jobs/eval_job.h"
#include "moewb/jobs/freq_job.h"
#include "moewb/jobs/generate_job.h"
#include "moewb/jobs/kv_job.h"
#include "moewb/methods/spec.h"
#include "workbench_session.h"

namespace moewb::gui {

EngineJobs::EngineJobs(WorkbenchSession* session) : QObject(session), session_(session) {
  connect(session_->jobs(), &JobRunner::jobFinished, this, &EngineJobs::onJobFinished);
  connect(session_, &WorkbenchSession::modelOpened, this, &EngineJobs::onModelOpened);
}

QString EngineJobs::demoTextPath() {
  try {
    const QString path = QDir(QString::fromStdString(demoModelPath()))
                             .absoluteFilePath(QStringLiteral("../demo-text/sample.txt"));
    if (QFileInfo::exists(path)) return QDir::cleanPath(path);
  } catch (const std::exception&) {
    // No demo model installed: no default text either; the user picks one.
  }
  return {};
}

QString EngineJobs::quickSpecError(const QString& spec) {
  // The one spec parser (moewb/methods/spec.h); a rank policy is checked when the job runs.
  try {
    methods::parseMethodSpec(spec.toStdString());
    return {};
  } catch (const moewb::Error& e) {
    return QString::fromStdString(e.what());
  }
}

int EngineJobs::runningJob(Kind kind) const {
  const auto it = running_.find(kind);
  return it == running_.end() ? 0 : it->second;
}

void EngineJobs::cancel(Kind kind) {
  if (int id = runningJob(kind)) session_->jobs()->cancel(id);
}

bool EngineJobs::current(Kind kind, int generation, int id) const {
  return generation == session_->generation() && runningJob(kind) == id && id != 0;
}

template <typename F>
void EngineJobs::post(Kind kind, int generation, std::shared_ptr<const int> id, F apply) {
  QPointer<EngineJobs> self(this);
  QMetaObject::invokeMethod(
      this,
      // The id is read here, on the GUI thread, which wrote it when submit() returned.
      [self, kind, generation, id = std::move(id), apply = std::move(apply)]() mutable {
        if (self && self->current(kind, generation, *id)) apply(*self);
      },
      Qt::QueuedConnection);
}

int EngineJobs::submit(Kind kind, const QString& title, JobWork work) {
  // A new request makes the previous one of its kind stale: stop it rather than let it finish unseen.
  cancel(kind);
  const int id = session_->jobs()->submit(title, std::move(work));
  running_[kind] = id;
  kindOf_[id] = kind;
  emit jobStarted(kind, id);
  return id;
}

void EngineJobs::onJobFinished(int id, JobState state, const QString& message) {
  const auto it = kindOf_.find(id);
  if (it == kindOf_.end()) return;
  const Kind kind = it->second;
  kindOf_.erase(it);
  const bool wasCurrent = runningJob(kind) == id;
  if (wasCurrent) running_.erase(kind);
  if (wasCurrent) {
    const bool done = state == JobState::Done;
    switch (kind) {
      case Kind::Frequency:
        if (done && pendingFrequency_) session_->setExpertFrequencies(std::move(pendingFrequency_));
        pendingFrequency_.reset();
        break;
      case Kind::KvCapture:
        if (done && pendingKv_) {
          kv_ = std::move(pendingKv_);
          kvSource_ = pendingKvSource_;
          emit kvCaptureChanged();
        }
        pendingKv_.reset();
        break;
      case Kind::Perplexity:
        // Done: the run's rows become the table. Otherwise the table goes back to the last complete run.
        if (done) {
          rows_ = std::move(pendingRows_);
          rowsRequest_ = runningRequest_;
        }
        pendingRows_.clear();
        emit perplexityRowsChanged();
        break;
      case Kind::Generation:
        // Done: the result (speeds, memory) is shown; stopped or failed: the text so far stays.
        if (done && pendingGeneration_) {
          generation_ = std::move(pendingGeneration_);
          emit generationChanged();
        }
        pendingGeneration_.reset();
        break;
    }
  }
  emit jobFinished(kind, id, state, message);
}

void EngineJobs::onModelOpened() {
  // Results of the previous model say nothing about this one.
  pendingFrequency_.reset();
  pendingKv_.reset();
  pendingRows_.clear();
  running_.clear();
  kv_.reset();
  kvSource_.clear();
  rows_.clear();
  generatedText_.clear();
  generation_.reset();
  pendingGeneration_.reset();
  emit kvCaptureChanged();
  emit perplexityRowsChanged();
  emit generatedTextChanged();
  emit generationChanged();
}

namespace {
bool needModel(const WorkbenchSession& session, QString* error) {
  if (session.catalog()) return true;
  if (error) *error = QObject::tr("Open a model first.");
  return false;
}
}  // namespace

namespace {

// Engine jobs run on the GPU engine when this build and machine have one (the CLI's --device auto).
void useGpuWhenPresent(engine::MoeEngine& engine) {
  engine.setForwardBackend(app::sharedGpuEngine());
}

}  // namespace

int EngineJobs::measureFrequencies(const FrequencyRequest& request, QString* error) {
  if (!needModel(*session_, error)) return 0;
  if (request.textFile.isEmpty()) {
    if (error) *error = tr("Choose a text file to route through the model.");
    return 0;
  }
  const int generation = session_->generation();
  const std::string model = session_->catalog()->checkpoint().root();
  auto id = std::make_shared<int>(0);
  *id =
      submit(Kind::Frequency, tr("Expert frequencies on %1").arg(QFileInfo(request.textFile).fileName()),
             [this, id, generation, model, request](const ProgressFn& progress) {
               // `moewb freq --text FILE --seq-len N --max-windows W`: the same request and function.
               jobs::FreqRequest freq;
               freq.on_engine = useGpuWhenPresent;
               freq.model = model;
               freq.text = request.textFile.toStdString();
               freq.seq_len = request.seqLen;
               freq.max_windows = request.maxWindows;
               engine::ExpertFrequencyFile file = jobs::runFreqJob(freq, progress);
               ExpertFrequencyRecord record;
               record.frequency = std::move(file.frequency);
               record.source = request.textFile;
               record.model = QString::fromStdString(file.model);
               record.seqLen = file.seq_len;
               post(Kind::Frequency, generation, id, [record = std::move(record)](EngineJobs& self) mutable {
                 self.pendingFrequency_ = std::move(record);
               });
             });
  return *id;
}

int EngineJobs::captureKv(const KvCaptureRequest& request, QString* error) {
  if (!needModel(*session_, error)) return 0;
  if (request.prompt.trimmed().isEmpty()) {
    if (error) *error = tr("Type a prompt to capture.");
    return 0;
  }
  const int generation = session_->generation();
  const std::string model = session_->catalog()->checkpoint().root();
  auto id = std::make_shared<int>(0);
  *id =
      submit(Kind::KvCapture, tr("K/V capture of a %n-character prompt", nullptr, int(request.prompt.size())),
             [this, id, generation, model, request](const ProgressFn& progress) {
               // `moewb kv --prompt TEXT --max-tokens N --first-tokens F`: the same request and function.
               jobs::KvRequest kv;
               kv.on_engine = useGpuWhenPresent;
               kv.model = model;
               kv.prompt = request.prompt.toStdString();
               kv.max_tokens = request.maxTokens;
               kv.first_tokens = request.firstTokens;
               const std::shared_ptr<const engine::KvCapture> capture = jobs::runKvJob(kv, progress).capture;
               const QString source = tr("prompt of %n token(s)", nullptr, int(capture->length));
               post(Kind::KvCapture, generation, id, [capture, source](EngineJobs& self) {
                 self.pendingKv_ = capture;
                 self.pendingKvSource_ = source;
               });
             });
  return *id;
}

int EngineJobs::openKvCapture(const QString& path, QString* error) {
  if (path.isEmpty()) {
    if (error) *error = tr("No file chosen.");
    return 0;
  }
  const int generation = session_->generation();
  auto id = std::make_shared<int>(0);
  *id = submit(Kind::KvCapture, tr("Open K/V capture %1").arg(QFileInfo(path).fileName()),
               [this, id, generation, path](const ProgressFn& progress) {
                 progress(0.0, "reading " + path.toStdString());
                 auto capture =
                     std::make_shared<engine::KvCapture>(engine::loadKvCapture(path.toStdString()));
                 progress(1.0, "read");
                 post(Kind::KvCapture, generation, id, [capture, path](EngineJobs& self) {
                   self.pendingKv_ = capture;
                   self.pendingKvSource_ = path;
                 });
               });
  return *id;
}

int EngineJobs::saveKvCapture(const QString& path, QString* error) {
  if (!kv_) {
    if (error) *error = tr("No K/V capture to save: capture a prompt or open a file first.");
    return 0;
  }
  // Writing is not a new capture: it must not cancel one that is running, so it is not a Kind of its own
  // and only goes through the runner (off the GUI thread; saveKvCapture writes atomically).
  return session_->jobs()->submit(tr("Save K/V capture to %1").arg(QFileInfo(path).fileName()),
                                  [capture = kv_, path](const ProgressFn& progress) {
                                    progress(0.0, "writing " + path.toStdString());
                                    engine::saveKvCapture(*capture, path.toStdString());
                                    progress(1.0, "written");
                                  });
}

int EngineJobs::evaluatePerplexity(const PerplexityRequest& request, QString* error) {
  if (!needModel(*session_, error)) return 0;
  if (request.textFile.isEmpty()) {
    if (error) *error = tr("Choose a text file to evaluate on.");
    return 0;
  }
  for (const QString& spec : request.quickSpecs)
    if (const QString why = quickSpecError(spec); !why.isEmpty()) {
      if (error) *error = why;
      return 0;
    }
  std::shared_ptr<const quant::ModelQuantization> lastRun;
  QString lastRunLabel;
  if (request.lastRun) {
    lastRun = session_->quantization();
    if (!lastRun) {
      if (error) *error = tr("There is no completed quantization run in memory (run one in the Jobs view).");
      return 0;
    }
    const QuantSettings& s = session_->resultSettings();
    lastRunLabel = tr("last run (%1)").arg(s.describe());
  }
  if (!request.original && !lastRun && request.exportFolders.isEmpty() && request.quickSpecs.isEmpty()) {
    if (error) *error = tr("Nothing to evaluate: tick the original or add a variant.");
    return 0;
  }
  std::optional<quant::ExpertFrequencies> frequencies;
  if (const quant::ExpertFrequencies* f = session_->expertFrequencies()) frequencies = *f;
  const int generation = session_->generation();
  const std::string model = session_->catalog()->checkpoint().root();
  pendingRows_.clear();
  runningRequest_ = request;
  auto id = std::make_shared<int>(0);
  *id = submit(
      Kind::Perplexity, tr("Perplexity on %1").arg(QFileInfo(request.textFile).fileName()),
      [this, id, generation, model, request, lastRun, lastRunLabel, frequencies](const ProgressFn& progress) {
        // `moewb eval --text FILE [--quantized DIR]... [--quantize SPEC]...`: the same request and function.
        jobs::EvalRequest eval;
        eval.on_engine = useGpuWhenPresent;
        eval.model = model;
        eval.text = request.textFile.toStdString();
        eval.options.seq_len = request.seqLen;
        eval.options.max_windows = request.maxWindows;
        eval.options.batch_tokens = request.batchTokens;
        eval.original = request.original;
        eval.last_run = lastRun;
        eval.last_run_label = lastRunLabel.toStdString();
        for (const QString& dir : request.exportFolders) eval.export_folders.push_back(dir.toStdString());
        for (const QString& spec : request.quickSpecs) eval.quick_specs.push_back(spec.toStdString());
        eval.frequencies = frequencies;
        // The first variant (the original when it is evaluated) is the reference of the paired comparison.
        std::optional<engine::PerplexityResult> first;
        jobs::runEvalJob(eval, progress, [&](const jobs::EvalVariantResult& v) {
          PerplexityRow row;
          row.perplexityStderr = v.perplexity.ppl_stderr;
          if (!first) {
            first = v.perplexity;
          } else {
            const engine::PairedNllDifference d = engine::pairedNllDifference(v.perplexity, *first);
            row.hasPaired = true;
            row.deltaNll = d.mean;
            row.deltaNllStderr = d.standard_error;
            row.deltaSignificant = d.significant;
          }
          row.variant = QString::fromStdString(v.label);
          row.original = v.original;
          row.perplexity = v.perplexity.ppl;
          row.meanNll = v.perplexity.nll;
          row.tokensScored = v.perplexity.tokens_scored;
          row.windows = v.perplexity.windows;
          row.weightBytes = v.weight_bytes;
          row.replacedMatrices = v.replaced_matrices;
          row.tokensPerSecond = v.perplexity.tokens_per_second;
          post(Kind::Perplexity, generation, id, [row](EngineJobs& self) {
            self.pendingRows_.push_back(row);
            emit self.perplexityRowArrived();
          });
        });
      });
  return *id;
}

int EngineJobs::generate(const GenerationRequest& request, QString* error) {
  if (!needModel(*session_, error)) return 0;
  if (request.prompt.trimmed().isEmpty()) {
    if (error) *error = tr("Type a prompt to continue.");
    return 0;
  }
  const int generation = session_->generation();
  const std::string model = session_->catalog()->checkpoint().root();
  generatedText_.clear();
  pendingGeneration_.reset();
  emit generatedTextChanged();
  auto id = std::make_shared<int>(0);
  *id = submit(Kind::Generation, tr("Generate %n token(s)", nullptr, request.maxNewTokens),
               [this, id, generation, model, request](const ProgressFn& progress) {
                 // `moewb generate --prompt TEXT --max-new-tokens N`: the same request and function.
                 jobs::GenerateRequest g;
                 g.on_engine = useGpuWhenPresent;
                 g.model = model;
                 g.prompt = request.prompt.toStdString();
                 g.options.max_new_tokens = request.maxNewTokens;
                 auto result = std::make_shared<jobs::GenerateJobResult>(
                     jobs::runGenerateJob(g, progress, [&](const std::string& text) {
                       post(Kind::Generation, generation, id, [text = QString::fromStdString(text)](EngineJobs& self) {
                         self.generatedText_ = text;
                         emit self.generatedTextChanged();
                       });
                     }));
                 post(Kind::Generation, generation, id, [result](EngineJobs& self) {
                   self.pendingGeneration_ = *result;
                   self.generatedText_ = QString::fromStdString(result->generation.text);
                   emit self.generatedTextChanged();
                 });
               });
  return *id;
}

}  // namespace moewb::gui

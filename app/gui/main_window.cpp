// SPDX-License-Identifier: MIT
#include "main_window.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QUndoStack>
#include <cstdio>

#include "charts/convergence_plot.h"
#include "engine_jobs.h"
#include "frequency_panel.h"
#include "gpu_bench_panel.h"
#include "heatmap/heatmap_view.h"
#include "heatmap_panel.h"
#include "inspector_panel.h"
#include "jobs_panel.h"
#include "kv_panel.h"
#include "model_export.h"
#include "models/tensor_filter_proxy.h"
#include "models/tensor_table_model.h"
#include "moewb/demo_model.h"
#include "perplexity_panel.h"
#include "policy/policy_editor.h"
#include "policy_bridge.h"
#include "project_file.h"
#include "report_writer.h"
#include "summary_panel.h"
#include "tensors_panel.h"
#include "try_it_panel.h"
#include "workbench_session.h"

namespace moewb::gui {

namespace {
constexpr int kMaxRecent = 8;
}

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), session_(new WorkbenchSession(this)), tabs_(new QTabWidget(this)) {
  setWindowTitle(tr("MoE Workbench"));
  setAcceptDrops(true);
  summary_ = new SummaryPanel(session_, this);
  tensors_ = new TensorsPanel(session_, this);
  heatmap_ = new HeatmapPanel(session_, this);
  inspector_ = new InspectorPanel(session_, this);
  policy_ = new PolicyEditor(this);
  jobsPanel_ = new JobsPanel(session_, this);
  frequency_ = new FrequencyPanel(session_, this);
  kv_ = new KvPanel(session_, this);
  perplexity_ = new PerplexityPanel(session_, this);
  tryIt_ = new TryItPanel(session_, this);
  gpuBench_ = new GpuBenchPanel(session_, this);
  tabs_->addTab(summary_, tr("&Summary"));
  tabs_->addTab(tensors_, tr("&Tensors"));
  tabs_->addTab(heatmap_, tr("&Heatmap"));
  tabs_->addTab(inspector_, tr("&Inspector"));
  tabs_->addTab(policy_, tr("&Policy"));
  tabs_->addTab(jobsPanel_, tr("&Jobs"));
  tabs_->addTab(frequency_, tr("&Frequency"));
  tabs_->addTab(kv_, tr("&K/V cache"));
  tabs_->addTab(perplexity_, tr("Pe&rplexity"));
  tabs_->addTab(gpuBench_, tr("&GPU bench"));
  tabs_->addTab(tryIt_, tr("Tr&y it"));  // after the ten views with Alt+digit shortcuts
  setCentralWidget(tabs_);
  buildMenus();
  buildStatusBar();

  connect(session_, &WorkbenchSession::modelOpened, this, &MainWindow::onModelOpened);
  connect(session_, &WorkbenchSession::openFailed, this,
          [this](const QString& message) { reportError(tr("Cannot open model"), message); });
  connect(session_, &WorkbenchSession::statsFinished, this, [this] {
    installPolicyEvaluator();  // kurtosis policies need the statistics
    updateStatus();
  });
  connect(session_, &WorkbenchSession::frequenciesChanged, this, [this] {
    installPolicyEvaluator();  // frequency-R policies can be evaluated now
    heatmap_->setMetric(HeatmapMetric::ExpertFrequency);
  });
  connect(session_->jobs(), &JobRunner::jobChanged, this, &MainWindow::updateStatus);
  connect(session_->jobs(), &JobRunner::jobFinished, this, &MainWindow::updateStatus);
  connect(session_->engine(), &EngineJobs::jobFinished, this,
          [this](EngineJobs::Kind, int, JobState state, const QString& message) {
            // The view of the job shows the error in full; the status bar tells whoever looks elsewhere.
            if (state == JobState::Failed) statusBar()->showMessage(tr("Failed: %1").arg(message), 8000);
          });
  connect(tensors_, &TensorsPanel::matrixActivated, inspector_, &InspectorPanel::showMatrix);
  connect(heatmap_, &HeatmapPanel::matrixActivated, this, [this](std::size_t m) {
    inspector_->showMatrix(m);
    tensors_->selectMatrix(m);
  });
  auto namesOf = [this](const std::vector<std::size_t>& matrices) {
    std::vector<std::string> names;
    for (std::size_t m : matrices) names.push_back(session_->catalog()->matrices().at(m).name);
    return names;
  };
  connect(heatmap_, &HeatmapPanel::rankOverrideRequested, this,
          [this, namesOf](const std::vector<std::size_t>& m, int rank) {
            policy_->setOverrides(namesOf(m), rank);
          });
  connect(heatmap_, &HeatmapPanel::rankOverrideCleared, this,
          [this, namesOf](const std::vector<std::size_t>& m) { policy_->clearOverrides(namesOf(m)); });
  connect(policy_, &PolicyEditor::evaluated, this, [this](const PolicyEvaluation& e) {
    session_->setPolicy(policy_->state(), e);  // what the report and project files show
    if (e.ok) session_->setRanks(e.ranks);
  });
  connect(jobsPanel_, &JobsPanel::runRequested, this, &MainWindow::startQuantization);
  connect(jobsPanel_, &JobsPanel::settingsChanged, this, &MainWindow::installPolicyEvaluator);
  connect(session_, &WorkbenchSession::quantizationFinished, this, [this](JobState state) {
    if (state == JobState::Cancelled)
      statusBar()->showMessage(tr("Quantization cancelled; nothing was kept."), 5000);
    if (state == JobState::Failed) {
      const JobInfo* last = session_->jobs()->jobs().empty() ? nullptr : &session_->jobs()->jobs().back();
      reportError(tr("Quantization failed"), last ? last->message : QString());
    }
  });
  // Ranks can also be set from the tensor table.
  tensors_->table()->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(tensors_->table(), &QWidget::customContextMenuRequested, this, [this](const QPoint& pos) {
    QMenu menu(this);
    QAction* set = menu.addAction(tr("Set rank override…"));
    if (menu.exec(tensors_->table()->viewport()->mapToGlobal(pos)) == set) applyOverridesFromTable();
  });

  QSettings settings;
  restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
  if (!settings.contains(QStringLiteral("window/geometry"))) resize(1360, 860);
  updateRecentMenu();
  updateStatus();
}

MainWindow::~MainWindow() = default;

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open Model…"), this, &MainWindow::openDialog);
  open->setShortcut(QKeySequence::Open);
  file->addAction(tr("Open Model &Folder…"), this, &MainWindow::openFolderDialog);
  file->addAction(tr("Open &Demo Model"), this,
                  [this] { openModel(QString::fromStdString(resolveModelPath(""))); });
  recentMenu_ = file->addMenu(tr("Open &Recent"));
  file->addSeparator();
  file->addAction(tr("Open Pro&ject…"), this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open project"), QString(),
                                                      tr("Workbench projects (*.moewb.json *.json)"));
    QString error;
    if (!path.isEmpty() && !openProject(path, &error)) reportError(tr("Cannot open project"), error);
  });
  QAction* save = file->addAction(tr("&Save Project"), this, [this] {
    QString path = projectPath_;
    if (path.isEmpty())
      path = QFileDialog::getSaveFileName(this, tr("Save project"), QStringLiteral("session.moewb.json"),
                                          tr("Workbench projects (*.moewb.json *.json)"));
    QString error;
    if (!path.isEmpty() && !saveProject(path, &error)) reportError(tr("Cannot save project"), error);
  });
  save->setShortcut(QKeySequence::Save);
  QAction* saveAs = file->addAction(tr("Save Project &As…"), this, [this] {
    const QString path =
        QFileDialog::getSaveFileName(this, tr("Save project"), QStringLiteral("session.moewb.json"),
                                     tr("Workbench projects (*.moewb.json *.json)"));
    QString error;
    if (!path.isEmpty() && !saveProject(path, &error)) reportError(tr("Cannot save project"), error);
  });
  saveAs->setShortcut(QKeySequence::SaveAs);
  file->addSeparator();
  QAction* exportModel =
      file->addAction(tr("&Export Compressed Model…"), this, [this] { exportModelDialog(ExportKind::Compressed); });
  exportModel->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
  file->addAction(tr("Export &Dequantized Checkpoint (bf16)…"), this,
                  [this] { exportModelDialog(ExportKind::Dequantized); });
  file->addAction(tr("Export &Report…"), this, &MainWindow::exportReportDialog)
      ->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);

  QMenu* edit = menuBar()->addMenu(tr("&Edit"));
  QAction* undo = policy_->undoStack()->createUndoAction(this, tr("&Undo"));
  undo->setShortcut(QKeySequence::Undo);
  QAction* redo = policy_->undoStack()->createRedoAction(this, tr("&Redo"));
  redo->setShortcut(QKeySequence::Redo);
  edit->addAction(undo);
  edit->addAction(redo);
  edit->addSeparator();
  QAction* find = edit->addAction(tr("&Filter Tensors"), this, [this] {
    showView(QStringLiteral("tensors"));
    tensors_->filterEdit()->setFocus();
    tensors_->filterEdit()->selectAll();
  });
  find->setShortcut(QKeySequence::Find);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  for (int i = 0; i < tabs_->count(); ++i) {
    QAction* a = view->addAction(tabs_->tabText(i).remove(QLatin1Char('&')), this,
                                 [this, i] { tabs_->setCurrentIndex(i); });
    // Alt+1…9, then Alt+0 for the tenth tab.
    if (i < 10) a->setShortcut(QKeySequence(Qt::ALT | Qt::Key(i < 9 ? Qt::Key_1 + i : Qt::Key_0)));
  }

  QMenu* run = menuBar()->addMenu(tr("&Run"));
  QAction* start = run->addAction(tr("&Start Quantization"), this, &MainWindow::startQuantization);
  start->setShortcut(QKeySequence(Qt::Key_F5));
  QAction* cancel = run->addAction(tr("&Cancel Running Job"), this, [this] {
    if (int id = session_->jobs()->runningJob()) session_->jobs()->cancel(id);
  });
  cancel->setShortcut(QKeySequence(Qt::SHIFT | Qt::Key_F5));
  run->addSeparator();
  run->addAction(tr("Measure Expert &Frequencies on a Text…"), this, [this] {
    if (!session_->catalog()) return;
    const QString text =
        QFileDialog::getOpenFileName(this, tr("Text to route through the model"), frequency_->textFile(),
                                     tr("Text (*.txt);;All files (*)"));
    if (text.isEmpty()) return;
    frequency_->setTextFile(text);
    showView(QStringLiteral("freq"));
    frequency_->run();
  });
  run->addAction(tr("&Load Expert Frequencies…"), this, [this] {
    showView(QStringLiteral("freq"));
    frequency_->loadDialog();
  });
  run->addAction(tr("Capture &K/V Cache of the Prompt"), this, [this] {
    showView(QStringLiteral("attention"));
    kv_->run();
  });
  run->addAction(tr("Evaluate &Perplexity"), this, [this] {
    showView(QStringLiteral("perplexity"));
    perplexity_->run();
  });

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About MoE Workbench"), this, &MainWindow::about);
  help->addAction(tr("About &Qt"), qApp, &QApplication::aboutQt);
}

void MainWindow::buildStatusBar() {
  statusText_ = new QLabel(this);
  progress_ = new QProgressBar(this);
  progress_->setRange(0, 1000);
  progress_->setMaximumWidth(240);
  progress_->setTextVisible(false);
  cancel_ = new QPushButton(tr("Cancel"), this);
  cancel_->setObjectName(QStringLiteral("statusCancel"));
  statusBar()->addWidget(statusText_, 1);
  statusBar()->addPermanentWidget(progress_);
  statusBar()->addPermanentWidget(cancel_);
  connect(cancel_, &QPushButton::clicked, this, [this] {
    if (int id = session_->jobs()->runningJob()) session_->jobs()->cancel(id);
  });
}

void MainWindow::updateStatus() {
  const int running = session_->jobs()->runningJob();
  const JobInfo* job = running ? session_->jobs()->job(running) : nullptr;
  progress_->setVisible(job != nullptr);
  cancel_->setVisible(job != nullptr);
  if (job) {
    progress_->setValue(int(job->fraction * 1000));
    statusText_->setText(QStringLiteral("%1 — %2").arg(job->title, job->stage));
    return;
  }
  const auto catalog = session_->catalog();
  if (!catalog) {
    statusText_->setText(tr("No model open"));
    return;
  }
  statusText_->setText(session_->statsComplete() ? tr("%1 — summary in %2 s, statistics in %3 s")
                                                       .arg(session_->modelPath())
                                                       .arg(session_->secondsToSummary(), 0, 'f', 2)
                                                       .arg(session_->secondsToStats(), 0, 'f', 2)
                                                 : session_->modelPath());
}

void MainWindow::openModel(const QString& path) {
  projectPath_.clear();
  session_->open(path);
  setWindowTitle(tr("%1 — MoE Workbench").arg(QFileInfo(path).fileName()));
}

void MainWindow::onModelOpened() {
  addRecent(session_->modelPath());
  installPolicyEvaluator();
  policy_->resetState(havePendingPolicy_ ? pendingPolicy_ : PolicyState{});
  havePendingPolicy_ = false;
  updateStatus();
}

void MainWindow::installPolicyEvaluator() {
  const auto catalog = session_->catalog();
  if (!catalog) return;
  // The context (facts, fixed bytes) is built once here; each edit then only runs the core's rank
  // assignment and byte count.
  policyContext_ =
      makePolicyContext(*catalog, session_->stats(), jobsPanel_->settings(), session_->expertFrequencies());
  policy_->setEvaluator(
      [context = policyContext_](const PolicyState& state) { return evaluatePolicy(*context, state); });
}

QString MainWindow::currentPolicyText() const {
  if (!policyContext_) return {};
  try {
    return QString::fromStdString(resolvePolicy(*policyContext_, policy_->state()).text());
  } catch (const std::exception&) {
    return {};  // the editor already shows why the policy does not apply; runs use the last valid ranks
  }
}

void MainWindow::reportError(const QString& title, const QString& message) {
  // Headless runs (--screenshot) must never wait on a dialog nobody can close.
  if (!interactive_) {
    std::fprintf(stderr, "moewb-gui: %s: %s\n", qPrintable(title), qPrintable(message));
    return;
  }
  QMessageBox::warning(this, title, message);
}

void MainWindow::openDialog() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open model"), QString(),
                                                    tr("Checkpoints (*.safetensors *.json);;All files (*)"));
  if (!path.isEmpty()) openModel(path);
}

void MainWindow::openFolderDialog() {
  // Hugging Face checkpoints are folders (config.json, shards, index, tokenizer).
  const QString path = QFileDialog::getExistingDirectory(this, tr("Open model folder"));
  if (!path.isEmpty()) openModel(path);
}

void MainWindow::addRecent(const QString& path) {
  QSettings settings;
  QStringList recent = settings.value(QStringLiteral("recentFiles")).toStringList();
  recent.removeAll(path);
  recent.prepend(path);
  while (recent.size() > kMaxRecent) recent.removeLast();
  settings.setValue(QStringLiteral("recentFiles"), recent);
  updateRecentMenu();
}

void MainWindow::updateRecentMenu() {
  recentMenu_->clear();
  const QStringList recent = QSettings().value(QStringLiteral("recentFiles")).toStringList();
  for (const QString& path : recent) recentMenu_->addAction(path, this, [this, path] { openModel(path); });
  recentMenu_->setEnabled(!recent.isEmpty());
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  if (e->mimeData()->hasUrls() && e->mimeData()->urls().value(0).isLocalFile()) e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
  const QString path = e->mimeData()->urls().value(0).toLocalFile();
  if (path.isEmpty()) return;
  if (path.endsWith(QLatin1String(".moewb.json"))) {
    QString error;
    if (!openProject(path, &error)) reportError(tr("Cannot open project"), error);
  } else {
    openModel(path);
  }
  e->acceptProposedAction();
}

void MainWindow::closeEvent(QCloseEvent* e) {
  QSettings().setValue(QStringLiteral("window/geometry"), saveGeometry());
  session_->cancelAll();
  QMainWindow::closeEvent(e);
}

QStringList MainWindow::viewNames() {
  return {QStringLiteral("summary"),    QStringLiteral("tensors"),   QStringLiteral("heatmap"),
          QStringLiteral("inspector"),  QStringLiteral("policy"),    QStringLiteral("jobs"),
          QStringLiteral("freq"),       QStringLiteral("attention"), QStringLiteral("kv-channels"),
          QStringLiteral("perplexity"), QStringLiteral("gpu-bench"), QStringLiteral("try-it")};
}

bool MainWindow::showView(const QString& name) {
  const QString view = name.toLower();
  QWidget* tab = nullptr;
  const int i = viewNames().indexOf(view);
  if (i < 0) return false;
  if (view == QLatin1String("attention") || view == QLatin1String("kv-channels")) {
    kv_->showPage(view == QLatin1String("attention") ? KvPanel::Page::Attention : KvPanel::Page::Channels);
    tab = kv_;
  } else if (view == QLatin1String("perplexity")) {
    tab = perplexity_;
  } else if (view == QLatin1String("try-it")) {
    tab = tryIt_;
  } else if (view == QLatin1String("gpu-bench")) {
    tab = gpuBench_;
  } else {
    tab = tabs_->widget(i);  // the first seven names are the first seven tabs, in order
  }
  tabs_->setCurrentWidget(tab);
  return true;
}

QString MainWindow::currentViewName() const {
  QWidget* tab = tabs_->currentWidget();
  if (tab == kv_)
    return kv_->currentPage() == KvPanel::Page::Attention ? QStringLiteral("attention")
                                                          : QStringLiteral("kv-channels");
  if (tab == perplexity_) return QStringLiteral("perplexity");
  if (tab == tryIt_) return QStringLiteral("try-it");
  if (tab == gpuBench_) return QStringLiteral("gpu-bench");
  return viewNames().value(tabs_->currentIndex());
}

int MainWindow::startQuantization() {
  if (!session_->catalog() || session_->quantizationRunning()) return 0;
  std::vector<std::size_t> matrices;
  if (jobsPanel_->onlyFiltered()) {
    matrices = tensors_->visibleMatrices();
    if (matrices.empty()) {
      QMessageBox::information(this, tr("Nothing to quantize"),
                               tr("The table filter shows no weight matrix."));
      return 0;
    }
  }
  jobsPanel_->convergence()->clear();
  return session_->startQuantization(jobsPanel_->settings(), matrices, currentPolicyText());
}

void MainWindow::applyOverridesFromTable() {
  const QModelIndex current = tensors_->table()->currentIndex();
  const qlonglong m = current.data(TensorTableModel::MatrixIndexRole).toLongLong();
  if (m < 0 || !session_->catalog()) return;
  bool ok = false;
  const int rank = QInputDialog::getInt(this, tr("Set compensator rank"), tr("Rank:"), 16, 0, 4096, 1, &ok);
  if (ok) policy_->setOverrides({session_->catalog()->matrices().at(std::size_t(m)).name}, rank);
}

bool MainWindow::saveProject(const QString& path, QString* error) {
  ProjectFile project;
  project.modelPath = session_->modelPath();
  project.policy = policy_->state();
  project.settings = jobsPanel_->settings();
  project.resultSettings = session_->resultSettings();
  if (const auto catalog = session_->catalog())
    for (const auto& [m, r] : session_->results()) project.results[catalog->matrices()[m].name] = r;
  project.view = currentViewName();
  project.heatmapMetric = int(heatmap_->metric());
  project.filter = tensors_->filterEdit()->text();
  project.geometry = saveGeometry();
  if (!writeProjectFile(path, project, error)) return false;
  projectPath_ = path;
  statusBar()->showMessage(tr("Project saved to %1").arg(path), 4000);
  return true;
}

bool MainWindow::openProject(const QString& path, QString* error) {
  ProjectFile project;
  if (!readProjectFile(path, &project, error)) return false;
  pendingPolicy_ = project.policy;
  havePendingPolicy_ = true;
  jobsPanel_->setSettings(project.settings);
  tensors_->filterEdit()->setText(project.filter);
  heatmap_->setMetric(HeatmapMetric(project.heatmapMetric));
  showView(project.view);
  if (!project.geometry.isEmpty()) restoreGeometry(project.geometry);
  // Results are matched by tensor name once the model is open (indices may differ between versions).
  auto results = std::make_shared<std::map<std::string, MatrixResult>>(project.results);
  const QuantSettings resultSettings = project.resultSettings;
  auto connection = std::make_shared<QMetaObject::Connection>();
  *connection =
      connect(session_, &WorkbenchSession::modelOpened, this, [this, results, resultSettings, connection] {
        disconnect(*connection);
        std::map<std::size_t, MatrixResult> byIndex;
        const auto& matrices = session_->catalog()->matrices();
        for (std::size_t i = 0; i < matrices.size(); ++i)
          if (auto it = results->find(matrices[i].name); it != results->end()) byIndex[i] = it->second;
        session_->setResults(std::move(byIndex), resultSettings);
      });
  openModel(project.modelPath);
  projectPath_ = path;
  return true;
}

void MainWindow::exportModelDialog(ExportKind kind) {
  if (!session_->catalog()) return;
  // The export is a new folder: the user names it in a folder chooser (a save dialog would suggest a file).
  QFileDialog dialog(this, kind == ExportKind::Dequantized ? tr("Export the dequantized checkpoint to a new folder")
                                                           : tr("Export the compressed model to a new folder"));
  dialog.setFileMode(QFileDialog::AnyFile);
  dialog.setOption(QFileDialog::ShowDirsOnly);
  dialog.setAcceptMode(QFileDialog::AcceptSave);
  dialog.setLabelText(QFileDialog::Accept, tr("Export"));
  dialog.selectFile(kind == ExportKind::Dequantized ? QStringLiteral("dequantized-model")
                                                    : QStringLiteral("compressed-model"));
  if (dialog.exec() != QDialog::Accepted || dialog.selectedFiles().isEmpty()) return;
  const QString dir = dialog.selectedFiles().front();
  const auto q = session_->quantization();
  startModelExport(*session_, jobsPanel_->settings(), currentPolicyText(), dir, kind);
  statusBar()->showMessage(
      q ? tr("Exporting the last run to %1").arg(dir)
        : tr("No completed run: quantizing with the current settings, then exporting to %1").arg(dir),
      6000);
  showView(QStringLiteral("jobs"));
}

void MainWindow::exportReportDialog() {
  if (!session_->catalog()) return;
  const QString dir =
      QFileDialog::getSaveFileName(this, tr("Write report to folder"), QStringLiteral("report"));
  if (dir.isEmpty()) return;
  QString error;
  if (!writeReport(dir, *this, &error))
    reportError(tr("Report not written"), error);
  else
    statusBar()->showMessage(tr("Report written to %1").arg(dir), 5000);
}

void MainWindow::about() {
  QMessageBox::about(
      this, tr("About MoE Workbench"),
      tr("<h3>MoE Workbench %1</h3><p>Inspect, analyse and compress Mixture-of-Experts checkpoints.</p>"
         "<p>Core %2 · Qt %3 (built with %4) · Dear ImGui %5 · heatmap drawn with %6</p><p>MIT licence.</p>")
          .arg(QStringLiteral(MOEWB_VERSION), QString::fromStdString(versionString()),
               QString::fromLatin1(qVersion()), QStringLiteral(QT_VERSION_STR), HeatmapView::imguiVersion(),
               heatmap_->view()->usesOpenGl() ? tr("OpenGL") : tr("QPainter (no OpenGL context)")));
}

}  // namespace moewb::gui

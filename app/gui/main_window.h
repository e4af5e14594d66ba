// SPDX-License-Identifier: MIT
#pragma once
#include <QMainWindow>
#include <memory>

#include "jobs/job_runner.h"
#include "model_export.h"
#include "policy/policy_state.h"

class QTabWidget;
class QProgressBar;
class QLabel;
class QPushButton;
class QMenu;

namespace moewb::gui {
class WorkbenchSession;
class SummaryPanel;
class TensorsPanel;
class HeatmapPanel;
class InspectorPanel;
class PolicyEditor;
class JobsPanel;
class FrequencyPanel;
class KvPanel;
class PerplexityPanel;
class GpuBenchPanel;
class TryItPanel;
struct PolicyContext;

// The workbench window: thin wiring of the session (document and jobs) to the panels, menus, status
// bar and files (projects, reports, exports). No long work runs here.
class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  WorkbenchSession* session() const { return session_; }
  void openModel(const QString& path);
  bool openProject(const QString& path, QString* error = nullptr);
  bool saveProject(const QString& path, QString* error = nullptr);
  // Views by name for --screenshot and project files: summary, tensors, heatmap, inspector, policy, jobs,
  // freq, attention, kv-channels, perplexity, gpu-bench, try-it (attention and kv-channels are the two pages of
  // the K/V cache tab).
  static QStringList viewNames();
  bool showView(const QString& name);
  QString currentViewName() const;
  // Starts a quantization with the Jobs panel's settings (the Run button and F5).
  int startQuantization();
  // Off for --screenshot runs: errors go to stderr instead of modal dialogs.
  void setInteractive(bool interactive) { interactive_ = interactive; }

  TensorsPanel* tensorsPanel() const { return tensors_; }
  HeatmapPanel* heatmapPanel() const { return heatmap_; }
  InspectorPanel* inspectorPanel() const { return inspector_; }
  PolicyEditor* policyEditor() const { return policy_; }
  JobsPanel* jobsPanel() const { return jobsPanel_; }
  FrequencyPanel* frequencyPanel() const { return frequency_; }
  KvPanel* kvPanel() const { return kv_; }
  PerplexityPanel* perplexityPanel() const { return perplexity_; }
  TryItPanel* tryItPanel() const { return tryIt_; }
  GpuBenchPanel* gpuBenchPanel() const { return gpuBench_; }

 protected:
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dropEvent(QDropEvent* e) override;
  void closeEvent(QCloseEvent* e) override;

 private:
  void buildMenus();
  void buildStatusBar();
  void updateStatus();
  void updateRecentMenu();
  void addRecent(const QString& path);
  void onModelOpened();
  void installPolicyEvaluator();
  void openDialog();
  void openFolderDialog();
  void exportModelDialog(ExportKind kind);
  void exportReportDialog();
  void about();
  void applyOverridesFromTable();
  QString currentPolicyText() const;
  void reportError(const QString& title, const QString& message);

  WorkbenchSession* session_;
  QTabWidget* tabs_;
  SummaryPanel* summary_;
  TensorsPanel* tensors_;
  HeatmapPanel* heatmap_;
  InspectorPanel* inspector_;
  PolicyEditor* policy_;
  JobsPanel* jobsPanel_;
  FrequencyPanel* frequency_;
  KvPanel* kv_;
  PerplexityPanel* perplexity_;
  TryItPanel* tryIt_;
  GpuBenchPanel* gpuBench_;
  QLabel* statusText_;
  QProgressBar* progress_;
  QPushButton* cancel_;
  QMenu* recentMenu_;
  QString projectPath_;
  PolicyState pendingPolicy_;  // policy of a project being opened, applied once the model is open
  bool havePendingPolicy_ = false;
  bool interactive_ = true;
  std::shared_ptr<const PolicyContext> policyContext_;
};

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#pragma once
#include <QWidget>

class QPlainTextEdit;
class QSpinBox;
class QPushButton;
class QLabel;
class QTabWidget;

namespace moewb::gui {
class WorkbenchSession;
class JobStatusLine;
class AttentionPage;
class KvChannelsPage;

// K/V cache and attention: captures a prompt in the background (the core's captureKv, as `moewb kv`) or
// opens / saves a `moewb kv --out FILE` capture, and shows it on two pages: attention maps and K/V
// channel plots.
class KvPanel : public QWidget {
  Q_OBJECT
 public:
  enum class Page { Attention, Channels };
  KvPanel(WorkbenchSession* session, QWidget* parent = nullptr);

  void setPrompt(const QString& prompt);
  void setLimits(int maxTokens, int firstTokens);
  int run();                          // capture the prompt; 0 and the reason on the status line if not
  int openFile(const QString& path);  // load a capture in the background
  int saveFile(const QString& path);  // write the current capture in the background
  void showPage(Page page);
  Page currentPage() const;

  AttentionPage* attentionPage() const { return attention_; }
  KvChannelsPage* channelsPage() const { return channels_; }
  QPushButton* runButton() const { return run_; }
  QPushButton* cancelButton() const { return cancel_; }
  JobStatusLine* statusLine() const { return status_; }

  static QString defaultPrompt();

 private:
  void onCaptureChanged();
  void updateButtons();
  WorkbenchSession* session_;
  QPlainTextEdit* prompt_;
  QSpinBox* maxTokens_;
  QSpinBox* firstTokens_;
  QPushButton* run_;
  QPushButton* cancel_;
  QPushButton* save_;
  QLabel* source_;
  JobStatusLine* status_;
  QTabWidget* pages_;
  AttentionPage* attention_;
  KvChannelsPage* channels_;
};

}  // namespace moewb::gui

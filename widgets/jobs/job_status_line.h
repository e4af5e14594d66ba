// SPDX-License-Identifier: MIT
#pragma once
#include <QLabel>

namespace moewb::gui {
class JobRunner;

// One line under a view's Run button saying what its job is doing: its stage and progress while it
// runs, then done / cancelled / the error (in the error colour, naming the file or option at fault).
// Errors of a view appear here rather than in a modal dialog, so headless runs never wait on one.
class JobStatusLine : public QLabel {
  Q_OBJECT
 public:
  explicit JobStatusLine(JobRunner* runner, QWidget* parent = nullptr);
  // Follows job `id` until it finishes (0: stop following).
  void track(int id);
  int trackedJob() const { return job_; }
  void showMessage(const QString& text);
  void showError(const QString& text);

 private:
  void update(int id);
  JobRunner* runner_;
  int job_ = 0;
};

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#include "jobs/job_status_line.h"

#include "jobs/job_runner.h"

namespace moewb::gui {

JobStatusLine::JobStatusLine(JobRunner* runner, QWidget* parent) : QLabel(parent), runner_(runner) {
  setWordWrap(true);
  setTextInteractionFlags(Qt::TextSelectableByMouse);
  connect(runner_, &JobRunner::jobChanged, this, &JobStatusLine::update);
}

void JobStatusLine::track(int id) {
  job_ = id;
  if (id) update(id);
}

void JobStatusLine::showMessage(const QString& text) {
  setStyleSheet(QString());
  setText(text);
}

void JobStatusLine::showError(const QString& text) {
  setStyleSheet(QStringLiteral("color: #c0392b;"));
  setText(text);
}

void JobStatusLine::update(int id) {
  if (id != job_ || id == 0) return;
  const JobInfo* j = runner_->job(id);
  if (!j) return;
  switch (j->state) {
    case JobState::Queued:
      showMessage(tr("Queued behind the running job…"));
      break;
    case JobState::Running:
      showMessage(tr("%1 — %2 (%3%)").arg(j->title, j->stage).arg(int(j->fraction * 100)));
      break;
    case JobState::Done:
      showMessage(
          tr("%1 — done in %2 s").arg(j->title).arg(j->started.msecsTo(j->finished) / 1000.0, 0, 'f', 1));
      job_ = 0;
      break;
    case JobState::Cancelled:
      showMessage(tr("%1 — cancelled; the previous result is kept.").arg(j->title));
      job_ = 0;
      break;
    case JobState::Failed:
      showError(tr("%1 — failed: %2").arg(j->title, j->message));
      job_ = 0;
      break;
  }
}

}  // namespace moewb::gui

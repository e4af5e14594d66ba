// SPDX-License-Identifier: MIT
#include "policy/policy_commands.h"

#include "policy/policy_editor.h"

namespace moewb::gui {

PolicyEditCommand::PolicyEditCommand(PolicyEditor* editor, PolicyState before, PolicyState after,
                                     const QString& text, int mergeId)
    : QUndoCommand(text),
      editor_(editor),
      before_(std::move(before)),
      after_(std::move(after)),
      mergeId_(mergeId) {}

void PolicyEditCommand::undo() {
  editor_->applyState(before_);
}
void PolicyEditCommand::redo() {
  editor_->applyState(after_);
}

bool PolicyEditCommand::mergeWith(const QUndoCommand* other) {
  const auto* o = static_cast<const PolicyEditCommand*>(other);
  if (o->editor_ != editor_) return false;
  after_ = o->after_;
  setText(o->text());  // the step is named after where it ended ("Set budget to 140 MB")
  return true;
}

}  // namespace moewb::gui

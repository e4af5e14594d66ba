// SPDX-License-Identifier: MIT
#pragma once
#include <QUndoCommand>

#include "policy/policy_state.h"

namespace moewb::gui {
class PolicyEditor;

// Every edit of the policy is one of these on the editor's QUndoStack: it stores the state before and
// after, so undo/redo restore exactly (overrides of many heatmap cells at once are one step).
class PolicyEditCommand : public QUndoCommand {
 public:
  PolicyEditCommand(PolicyEditor* editor, PolicyState before, PolicyState after, const QString& text,
                    int mergeId = -1);
  void undo() override;
  void redo() override;
  int id() const override { return mergeId_; }
  // Consecutive edits of one continuous control (the budget spin box) merge into one undo step.
  bool mergeWith(const QUndoCommand* other) override;

 private:
  PolicyEditor* editor_;
  PolicyState before_, after_;
  int mergeId_;
};

}  // namespace moewb::gui

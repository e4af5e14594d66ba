// SPDX-License-Identifier: MIT
#pragma once
#include <QJsonObject>
#include <QString>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace moewb::gui {

// What the user edits in the rank policy editor: a policy expression in the shared text syntax
// (`dense-512+kurtosis-16`, as `moewb quantize --policy`), an optional memory budget, and per-tensor rank
// overrides keyed by matrix name (names survive reopening a project; indices might not).
struct PolicyState {
  QString expression = QStringLiteral("uniform-16");
  std::optional<double> budgetMB;
  std::map<std::string, int> overrides;
  bool operator==(const PolicyState&) const = default;
  QJsonObject toJson() const;
  static PolicyState fromJson(const QJsonObject& o);
};

// The totals the editor shows live, from the core's policy code.
struct PolicyEvaluation {
  bool ok = false;
  QString error;           // why the expression or budget could not be applied
  std::vector<int> ranks;  // per catalog matrix
  double averageRank = 0;
  double compensatorMB = 0;
  double totalMB = 0, originalMB = 0;
  double bitsPerWeight = 0;
  double minimumMB = 0;    // the model with no compensators: the smallest budget that can be met
  QString resolvedPolicy;  // budget mode: the policy the budget resolved to (`moewb quantize --budget` prints it)
};

using PolicyEvaluator = std::function<PolicyEvaluation(const PolicyState&)>;

}  // namespace moewb::gui

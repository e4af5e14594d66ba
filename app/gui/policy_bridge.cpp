// SPDX-License-Identifier: MIT
#include "policy_bridge.h"

#include <QObject>

#include "moewb/checkpoint.h"
#include "moewb/error.h"
#include "moewb/methods/registry.h"
#include "moewb/quant/model_quantizer.h"

namespace moewb::gui {

std::shared_ptr<const PolicyContext> makePolicyContext(const ModelCatalog& catalog, const ModelStats* stats,
                                                       const QuantSettings& settings,
                                                       const quant::ExpertFrequencies* frequencies) {
  auto c = std::make_shared<PolicyContext>();
  c->matrixCount = catalog.matrices().size();
  c->quantizable = quant::quantizableMatrices(catalog);
  // Facts without reading any weights: kurtosis comes from the session's statistics when complete.
  c->facts = quant::matrixFacts(catalog, c->quantizable, /*with_kurtosis=*/false);
  c->haveKurtosis = stats && stats->rows.size() >= c->matrixCount;
  if (c->haveKurtosis)
    for (std::size_t i = 0; i < c->quantizable.size(); ++i)
      c->facts[i].kurtosis = stats->rows[c->quantizable[i]].stats.kurtosis;
  // The policy's totals need the base codes' size and the compensators' storage of the chosen settings
  // (a rank-policy method's); settings that do not parse (or another method's) fall back to MiLo's defaults.
  quant::QuantizeSettings core = methods::weightMethod("milo").defaults();
  try {
    const quant::QuantizeSettings chosen = toCoreSettings(settings);
    if (methods::weightMethod(chosen.method).usesRankPolicy()) core = chosen;
    else core.grouped = chosen.grouped;
  } catch (const moewb::Error&) {
  }
  c->fixedBytes = quant::fixedBytes(catalog, c->quantizable, core.grouped);
  c->originalBytes = int64_t(catalog.checkpoint().totalBytes());
  c->parameters = catalog.paramsTotal();
  c->format = core.milo.compensator;
  if (frequencies) c->frequencies = *frequencies;
  return c;
}

quant::RankPolicy resolvePolicy(const PolicyContext& context, const PolicyState& state) {
  quant::RankPolicy policy;
  if (state.budgetMB) {
    policy = quant::policyForBudget(int64_t(*state.budgetMB * 1e6), context.fixedBytes, context.facts,
                                    context.format);
  } else {
    policy = quant::RankPolicy::parse(state.expression.toStdString());
  }
  // Per-tensor overrides are exact names (no '*'), after the expression's own overrides: the last wins.
  for (const auto& [name, rank] : state.overrides) policy.overrides.push_back({name, rank});
  return policy;
}

PolicyEvaluation evaluatePolicy(const PolicyContext& context, const PolicyState& state) {
  PolicyEvaluation e;
  e.ranks.assign(context.matrixCount, -1);
  e.minimumMB = double(context.fixedBytes) / 1e6;
  try {
    const quant::RankPolicy policy = resolvePolicy(context, state);
    if (state.budgetMB) e.resolvedPolicy = QString::fromStdString(policy.text());
    if (policy.needsKurtosis() && !context.haveKurtosis)
      throw Error("kurtosis policies need the statistics; they are still being computed");
    if (policy.needsFrequencies() && !context.frequencies)
      throw Error(
          "frequency policies need expert activation frequencies: load a `moewb freq --json` file or measure "
          "them (Run menu)");
    const std::vector<int> ranks =
        quant::assignRanks(policy, context.facts, context.frequencies ? &*context.frequencies : nullptr);
    double rankSum = 0;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      e.ranks[context.quantizable[i]] = ranks[i];
      rankSum += ranks[i];
    }
    const int64_t compensators = quant::compensatorBytesFor(context.facts, ranks, context.format);
    e.averageRank = ranks.empty() ? 0 : rankSum / double(ranks.size());
    e.compensatorMB = double(compensators) / 1e6;
    e.totalMB = double(context.fixedBytes + compensators) / 1e6;
    e.originalMB = double(context.originalBytes) / 1e6;
    e.bitsPerWeight =
        context.parameters ? 8.0 * double(context.fixedBytes + compensators) / double(context.parameters) : 0;
    e.ok = true;
  } catch (const std::exception& ex) {
    e.error = QString::fromUtf8(ex.what());
  }
  return e;
}

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#include "moewb/jobs/quantize_job.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "moewb/engine/engine.h"
#include "moewb/engine/variants.h"
#include "moewb/error.h"
#include "moewb/methods/registry.h"
#include "moewb/output_target.h"
#include "moewb/quant/export.h"

namespace moewb::jobs {

namespace {

std::vector<std::size_t> chooseMatrices(const QuantizeRequest& r) {
  const std::vector<std::size_t> quantizable = quant::quantizableMatrices(*r.catalog);
  std::vector<std::size_t> chosen;
  if (r.matrices.empty()) {
    chosen = quantizable;
  } else {
    // Only what the quantizers take (attention, MLPs, experts); a table filter may have selected others.
    for (std::size_t i : r.matrices)
      if (std::binary_search(quantizable.begin(), quantizable.end(), i)) chosen.push_back(i);
  }
  if (!r.only.empty()) {
    std::vector<std::size_t> kept;
    for (std::size_t i : chosen)
      if (quant::globMatch(r.only, r.catalog->matrices()[i].name)) kept.push_back(i);
    if (kept.empty()) throw Error(fmt::format("quantize: no quantizable matrix matches --only '{}'", r.only));
    chosen = std::move(kept);
  }
  if (chosen.empty())
    throw Error(fmt::format("{}: no quantizable weight matrix found", r.catalog->checkpoint().root()));
  return chosen;
}

void note(const QuantizeRequest& r, const std::string& text) {
  if (r.on_note) r.on_note(text);
}

// Ranks per chosen matrix and the policy text they came from ("" for a method without ranks).
std::pair<std::vector<int>, std::string> chooseRanks(const QuantizeRequest& r, const methods::WeightMethod& method,
                                                     const std::vector<std::size_t>& matrices) {
  if (!method.usesRankPolicy()) {
    if (!r.policy.empty() || !r.budget.empty())
      throw Error(fmt::format("quantize: --policy and --budget choose compensator ranks; method {} has none",
                              method.name()));
    return {std::vector<int>(matrices.size(), 0), ""};
  }
  if (!r.policy.empty() && !r.budget.empty()) throw Error("quantize: give either --policy or --budget, not both");
  if (!r.ranks.empty()) {
    if (r.ranks.size() != matrices.size())
      throw Error(fmt::format("quantize: {} ranks for {} matrices", r.ranks.size(), matrices.size()));
    return {r.ranks, r.policy};
  }
  const quant::QuantizeSettings& s = r.settings;
  quant::RankPolicy policy;
  if (!r.budget.empty()) {
    const auto facts = quant::matrixFacts(*r.catalog, matrices, false);
    policy = quant::policyForBudget(quant::parseByteSize(r.budget), quant::fixedBytes(*r.catalog, matrices, s.grouped),
                                    facts, s.milo.compensator, s.milo.compensator_group);
    note(r, fmt::format("budget {} -> policy {}", r.budget, policy.text()));
  } else {
    policy = quant::RankPolicy::parse(r.policy.empty() ? "uniform-16" : r.policy);
  }
  if (policy.needsFrequencies() && !r.frequencies)
    throw Error(fmt::format("quantize: policy {} needs expert frequencies (--frequencies FILE from `moewb freq --json`)",
                            policy.text()));
  const auto facts = quant::matrixFacts(*r.catalog, matrices, policy.needsKurtosis());
  return {quant::assignRanks(policy, facts, r.frequencies ? &*r.frequencies : nullptr), policy.text()};
}

// Before any work: the export folder may be written (moewb/output_target.h) and its place has room for
// the export the method predicts; the estimate is said.
void checkExportPlace(const QuantizeRequest& r, const std::vector<std::size_t>& matrices, const std::vector<int>& ranks) {
  OutputTarget target;
  target.path = r.out;
  target.option = "quantize: --out";
  target.replace = r.replace_existing;
  target.inputs = quant::exportInputs(r.catalog->checkpoint());
  if (!r.calibration_text.empty()) target.inputs.emplace_back(r.calibration_text);
  checkOutputTarget(target);
  const uint64_t bytes = quant::predictedExportBytes(*r.catalog, matrices, ranks, r.settings, r.dequantized);
  const uint64_t free_bytes = checkOutputSpace(target, bytes);
  note(r, fmt::format("export: about {} to {} ({} free there)", byteSizeText(bytes), r.out,
                      free_bytes == UINT64_MAX ? std::string("unknown") : byteSizeText(free_bytes)));
}

// Matrices with NaN/Inf weights quantize to a non-finite error: manifests held "rel_error": null (which
// `eval --quantized` then failed to read) and the mean error printed -nan, with exit code 0. Stop naming every
// one of them, or leave them unquantized when the request says so.
void handleNonFiniteMatrices(const QuantizeRequest& r, QuantizeJobResult& result) {
  quant::ModelQuantization& q = result.quantization;
  std::set<std::string> affected;
  for (const auto& m : q.matrices)
    if (!std::isfinite(m.rel_error)) affected.insert(m.source.name);
  if (affected.empty()) return;
  std::string listed;
  for (const auto& m : q.matrices)
    if (affected.count(m.source.name)) listed += (listed.empty() ? "" : ", ") + m.source.name;
  const std::string count = fmt::format("{} matri{}", affected.size(), affected.size() == 1 ? "x holds" : "ces hold");
  if (r.nonfinite == NonFiniteMatrices::Stop)
    throw Error(fmt::format("quantize: {} NaN/Inf weights, so the quantization error is not a number: {}; nothing "
                            "was exported (pass --nonfinite skip to leave them unquantized)",
                            count, listed));
  note(r, fmt::format("{} NaN/Inf weights and stay unquantized (--nonfinite skip): {}", count, listed));
  for (const auto& m : q.matrices)
    if (affected.count(m.source.name)) q.compressed_bytes -= m.bytes - m.original_bytes;
  std::erase_if(q.matrices, [&](const quant::QuantizedMatrix& m) { return affected.count(m.source.name) > 0; });
  std::erase_if(result.matrices,
                [&](std::size_t i) { return affected.count(r.catalog->matrices().at(i).name) > 0; });
}

ProgressFn slice(const ProgressFn& progress, double begin, double span) {
  return [progress, begin, span](double f, std::string_view stage) {
    return progress ? progress(begin + span * f, stage) : true;
  };
}

}  // namespace

QuantizeJobResult runQuantizeJob(const QuantizeRequest& r, const ProgressFn& progress) {
  if (!r.catalog) throw Error("quantize: no model");
  const methods::WeightMethod& method = methods::weightMethod(r.settings.method, "quantize: --method");
  method.validate(r.settings);
  const bool needs_calibration = method.needs() == methods::MethodNeeds::CalibrationHessians;
  if (r.dequantized && r.out.empty()) throw Error("quantize: --dequantized needs --out DIR");
  if (!needs_calibration && !r.calibration_text.empty())
    throw Error(fmt::format("quantize: method {} is calibration-free; --calib does not apply", method.name()));
  if (needs_calibration && r.calibration_text.empty())
    throw Error(fmt::format("quantize: method {} needs calibration text: --calib FILE (e.g. a few hundred kB of "
                            "text like the model's training data)",
                            method.name()));

  QuantizeJobResult result;
  result.matrices = chooseMatrices(r);
  auto [ranks, policy_text] = chooseRanks(r, method, result.matrices);
  if (!r.out.empty()) checkExportPlace(r, result.matrices, ranks);

  double begin = 0;
  quant::CalibrationSet calibration;
  quant::PipelineOptions pipeline = r.pipeline;
  if (needs_calibration) {
    std::vector<std::string> names;
    std::vector<int64_t> cols;
    for (std::size_t i : result.matrices) {
      names.push_back(r.catalog->matrices()[i].name);
      cols.push_back(r.catalog->matrices()[i].cols);
    }
    const std::string root = r.catalog->checkpoint().root();
    engine::MoeEngine engine(r.catalog->checkpointPtr());
    engine.setForwardBackend(r.calibration_backend);
    const std::vector<int32_t> ids =
        engine::loadEvaluationIds(root, r.calibration_text, "", engine.config().bos_token_id, false);
    note(r, fmt::format("calibration on {} tokens of {}; Hessians of {} matrices take {:.1f} MB", ids.size(),
                        r.calibration_text, names.size(), double(engine::hessianBytes(cols)) / 1e6));
    calibration = engine::collectHessians(engine, ids, names, r.calibration, slice(progress, 0, 0.3));
    pipeline.calibration = &calibration;
    begin = 0.3;
  }
  const double export_share = r.out.empty() ? 0.0 : 0.1;
  result.quantization = quant::quantizeModel(*r.catalog, r.settings, result.matrices, ranks,
                                             slice(progress, begin, 1.0 - begin - export_share), r.on_matrix_done,
                                             r.on_iteration, pipeline);
  result.quantization.policy = policy_text;
  handleNonFiniteMatrices(r, result);
  if (!r.out.empty()) {
    const ProgressFn writing = slice(progress, 1.0 - export_share, export_share);
    quant::ExportOptions options;
    options.replace_existing = r.replace_existing;
    if (r.dequantized)
      quant::writeDequantizedModel(*r.catalog, result.quantization, r.out, options, writing);
    else
      quant::writeCompressedModel(*r.catalog, result.quantization, r.out, options, writing);
  }
  return result;
}

}  // namespace moewb::jobs

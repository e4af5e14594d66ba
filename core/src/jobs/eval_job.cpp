// SPDX-License-Identifier: MIT
#include "moewb/jobs/eval_job.h"

#include <fmt/format.h>

#include <algorithm>

#include "moewb/atomic_file.h"
#include "moewb/engine/variants.h"
#include "moewb/error.h"
#include "moewb/methods/spec.h"
#include "moewb/output_target.h"
#include "moewb/quant/export.h"

namespace moewb::jobs {

namespace {

// Progress of one step of the job, mapped into [begin, begin + span) of the job's fraction.
ProgressFn slice(const ProgressFn& progress, double begin, double span, std::string prefix) {
  return [progress, begin, span, prefix = std::move(prefix)](double f, std::string_view stage) {
    return progress ? progress(begin + span * std::clamp(f, 0.0, 1.0), prefix + std::string(stage)) : true;
  };
}

struct Step {
  std::function<engine::WeightVariant(const ProgressFn&)> make;
  bool quantizes = false;
};

}  // namespace

EvalJobResult runEvalJob(const EvalRequest& r, const ProgressFn& progress,
                         const std::function<void(const EvalVariantResult&)>& on_variant) {
  if (r.model.empty()) throw Error("eval: no model");
  if (!r.text.empty() && !r.ids.empty()) throw Error("eval: give --text or --ids, not both");
  // A malformed spec fails before the model is read, not after the first variant's evaluation.
  for (const auto& spec : r.quick_specs) methods::parseMethodSpec(spec);
  if (!r.original && !r.last_run && r.export_folders.empty() && r.quick_specs.empty())
    throw Error("eval: nothing to evaluate (--no-original without --quantized/--quantize)");

  auto engine = engine::MoeEngine::open(r.model);
  if (!r.save_ids.empty()) {
    OutputTarget target{r.save_ids, OutputKind::File, "eval: --save-ids", r.replace_existing,
                        quant::exportInputs(engine->checkpoint())};
    target.inputs.insert(target.inputs.end(), {r.text, r.ids});
    target.inputs.insert(target.inputs.end(), r.export_folders.begin(), r.export_folders.end());
    checkOutputTarget(target);
    checkOutputSpace(target, 0);
  }
  if (r.on_engine) r.on_engine(*engine);
  auto ckpt = engine->checkpointPtr();
  const std::vector<int32_t> ids =
      engine::loadEvaluationIds(r.model, r.text, r.ids, engine->config().bos_token_id, r.no_bos);
  // Before a variant is quantized for nothing (the engine would say the same at the first evaluation).
  if (engine::evaluationWindows(int64_t(ids.size()), r.options).empty())
    throw Error(
        fmt::format("eval: {}: {} tokens, fewer than one window of --seq-len {} (lower the window length)",
                    r.text.empty() ? r.ids : r.text, ids.size(), r.options.seq_len));

  // Built one at a time, just before their evaluation, and dropped after it: only one set of replacement
  // matrices is in memory at once.
  std::vector<Step> steps;
  if (r.original)
    steps.push_back({[](const ProgressFn&) { return engine::WeightVariant{"original", nullptr, 0, 0}; }});
  if (r.last_run)
    steps.push_back({[&](const ProgressFn&) {
      return engine::variantFromQuantization(ckpt, *r.last_run, r.last_run_label);
    }});
  for (const auto& dir : r.export_folders)
    steps.push_back({[&, dir](const ProgressFn&) { return engine::loadReplacementCheckpoint(ckpt, dir); }});
  for (const auto& spec : r.quick_specs)
    steps.push_back({[&, spec](const ProgressFn& p) {
                       return engine::quantizeVariant(ckpt, spec, p,
                                                      r.frequencies ? &*r.frequencies : nullptr);
                     },
                     true});

  EvalJobResult result;
  result.model = ckpt->root();
  result.model_type = engine->config().model_type;
  result.ids = ids.size();
  const double share = 1.0 / double(steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const double begin = double(i) * share;
    // Quantizing a variant takes about as long as evaluating it on a few windows.
    const double build = steps[i].quantizes ? 0.4 * share : 0.0;
    engine::WeightVariant v = steps[i].make(slice(progress, begin, build, "quantize: "));
    engine->setWeights(v.weights);
    EvalVariantResult row;
    try {
      row.perplexity = engine::evaluatePerplexity(
          *engine, ids, r.options, slice(progress, begin + build, share - build, "eval " + v.label + ": "));
    } catch (...) {
      engine->setWeights(nullptr);
      throw;
    }
    engine->setWeights(nullptr);
    row.label = v.label;
    row.original = !v.weights;
    row.replaced_matrices = v.replaced_matrices;
    row.weight_bytes = engine::storedModelBytes(*ckpt, v);
    if (on_variant) on_variant(row);
    result.variants.push_back(std::move(row));
  }
  if (!r.save_ids.empty()) {
    // The ids as evaluated, for later runs with --ids (no tokenizer, and its memory, needed then); only
    // now, so that a cancelled run ("nothing was written") leaves no ids file behind.
    std::string text;
    for (auto id : ids) text += std::to_string(id) + '\n';
    writeFileAtomically(r.save_ids, text);
  }
  return result;
}

}  // namespace moewb::jobs

// SPDX-License-Identifier: MIT
#include "moewb/jobs/moqae_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "moewb/atomic_file.h"
#include "moewb/engine/evaluate.h"
#include "moewb/engine/kv_cache.h"
#include "moewb/engine/variants.h"
#include "moewb/error.h"
#include "moewb/output_target.h"
#include "moewb/quant/export.h"

namespace moewb::jobs {

namespace mq = methods::moqae;

namespace {

ProgressFn slice(const ProgressFn& progress, double begin, double span, std::string prefix) {
  return [progress, begin, span, prefix = std::move(prefix)](double f, std::string_view stage) {
    return progress ? progress(begin + span * std::clamp(f, 0.0, 1.0), prefix + std::string(stage)) : true;
  };
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void checkFileTarget(const std::string& path, const std::string& option, bool replace, const engine::MoeEngine& e,
                     std::vector<std::filesystem::path> inputs) {
  OutputTarget target{path, OutputKind::File, option, replace, quant::exportInputs(e.checkpoint())};
  target.inputs.insert(target.inputs.end(), inputs.begin(), inputs.end());
  checkOutputTarget(target);
  checkOutputSpace(target, 1 << 20);
}

// What train and sweep share: the engine, the calibration ids, the untrained routers and the cost table.
struct Prepared {
  std::unique_ptr<engine::MoeEngine> engine;
  mq::RouterSet untrained;
  mq::CostTable table;
};

Prepared prepare(const MoqaeTrainRequest& r, const ProgressFn& progress,
                 const std::function<void(engine::MoeEngine&)>& check_outputs) {
  if (r.model.empty()) throw Error("moqae: no model");
  if (r.text.empty()) throw Error("moqae: no calibration text (--text FILE)");
  auto configs = mq::parseConfigurations(r.configs, "moqae: --configs");  // before the model is read
  Prepared p;
  p.engine = engine::MoeEngine::open(r.model);
  if (check_outputs) check_outputs(*p.engine);
  if (r.on_engine) r.on_engine(*p.engine);
  const std::vector<int32_t> ids =
      engine::loadEvaluationIds(r.model, r.text, "", p.engine->config().bos_token_id, false);
  p.untrained = mq::makeRouterSet(std::move(configs), p.engine->config(), r.chunk_tokens, r.share, r.freeze,
                                  r.training.seed);
  p.table = mq::measureCostTable(*p.engine, ids, p.untrained, r.table, progress);
  return p;
}

// At most ~200 points: the mean of consecutive steps.
nlohmann::json downsampledCurve(const std::vector<double>& curve, int& every) {
  every = std::max<int>(1, static_cast<int>((curve.size() + 199) / 200));
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < curve.size(); i += std::size_t(every)) {
    const std::size_t e = std::min(curve.size(), i + std::size_t(every));
    double s = 0;
    for (std::size_t k = i; k < e; ++k) s += curve[k];
    out.push_back(s / double(e - i));
  }
  return out;
}

// The cost table in one line per group: mean NLL increase of a chunk under each configuration.
nlohmann::json meanDeltas(const mq::RouterSet& set, const mq::CostTable& table) {
  nlohmann::json out = nlohmann::json::array();
  for (int g = 0; g < table.groups; ++g) {
    nlohmann::json row = nlohmann::json::object();
    for (int j = 0; j < table.configs; ++j) {
      double sum = 0;
      for (int w = 0; w < table.windows; ++w)
        for (std::size_t c = 0; c < table.routed_chunks.size(); ++c) sum += table.deltaAt(w, g, c, j);
      row[set.configs[j].spec] = sum / double(std::max<std::size_t>(1, table.windows * table.routed_chunks.size()));
    }
    out.push_back(row);
  }
  return out;
}

mq::TrainingResult train(const MoqaeTrainRequest& r, const Prepared& p, mq::RouterSet& set,
                         const ProgressFn& progress) {
  set = p.untrained;
  const mq::TrainingResult t = mq::trainRouters(set, p.table, r.training, progress);
  int every = 1;
  const nlohmann::json curve = downsampledCurve(t.loss_curve, every);
  const auto& o = r.training;
  set.training = {{"lambda", o.lambda},
                  {"loss", mq::lossReadingName(o.loss)},
                  {"steps", o.steps},
                  {"batch_windows", o.batch},
                  {"optimizer", {{"name", "AdamW"}, {"lr", o.lr}, {"betas", {o.beta1, o.beta2}}, {"eps", o.eps},
                                 {"weight_decay", o.weight_decay}}},
                  {"seed", o.seed},
                  {"calibration", {{"text", r.text}, {"seq_len", r.table.seq_len}, {"windows", p.table.windows}}},
                  {"estimator", "cost table: per (window, group, chunk, configuration) the window's mean NLL "
                                "increase with only that chunk quantized; routing NLL estimated additively"},
                  {"cost_table_seconds", p.table.seconds},
                  {"cost_table_mean_delta", meanDeltas(set, p.table)},
                  {"train_seconds", t.seconds},
                  {"loss_first", t.loss_curve.empty() ? 0.0 : t.loss_curve.front()},
                  {"loss_last", t.loss_curve.empty() ? 0.0 : t.loss_curve.back()},
                  {"loss_curve", curve},
                  {"loss_curve_every", every},
                  {"calibration_before", t.before.toJson(set)},
                  {"calibration_after", t.after.toJson(set)}};
  return t;
}

}  // namespace

MoqaeTrainResult runMoqaeTrainJob(const MoqaeTrainRequest& r, const ProgressFn& progress) {
  const Prepared p = prepare(r, slice(progress, 0, 0.9, ""), [&](engine::MoeEngine& e) {
    if (!r.out.empty()) checkFileTarget(r.out, "moqae train: --out", r.replace_existing, e, {r.text});
  });
  MoqaeTrainResult result;
  result.table_seconds = p.table.seconds;
  result.training = train(r, p, result.routers, slice(progress, 0.9, 0.1, ""));
  if (!r.out.empty()) mq::saveRouterSet(result.routers, r.out);
  return result;
}

nlohmann::json MoqaeSweepResult::toJson() const {
  nlohmann::json rows_json = nlohmann::json::array();
  for (const auto& row : rows) {
    nlohmann::json j = {{"variant", row.variant},
                        {"ppl", row.ppl},
                        {"nll", row.nll},
                        {"kv_avg_bits", row.avg_bits},
                        {"kv_bytes", row.kv_bytes},
                        {"kv_bytes_at_context", row.kv_bytes_at_context}};
    if (!std::isnan(row.lambda)) {
      j["lambda"] = row.lambda;
      j["router"] = row.router;
      j["calibration_estimate"] = row.estimate;
      j["chunks_per_config"] = row.chunks_per_config;
    }
    rows_json.push_back(std::move(j));
  }
  return {{"model", model},         {"kv_context", context},         {"configs", configs},
          {"rows", rows_json},      {"cost_table_seconds", table_seconds}, {"train_seconds", train_seconds},
          {"eval_seconds", eval_seconds}};
}

MoqaeSweepResult runMoqaeSweepJob(const MoqaeSweepRequest& r, const ProgressFn& progress) {
  if (r.lambdas.empty()) throw Error("moqae sweep: no λ (--lambdas 0.1,0.3,...)");
  if (r.eval_text.empty()) throw Error("moqae sweep: no evaluation text (--eval-text FILE)");
  if (r.out_dir.empty()) throw Error("moqae sweep: no output folder (--out DIR)");
  for (const auto& b : r.baselines) methods::parseKvSpec(b);
  auto routerPath = [&](double lambda) {
    return (std::filesystem::path(r.out_dir) / fmt::format("router-lambda-{}.json", lambda)).string();
  };
  const std::string summary_path = (std::filesystem::path(r.out_dir) / "sweep.json").string();
  const double table_share = 0.45, train_share = 0.1;
  const Prepared p = prepare(r.train, slice(progress, 0, table_share, ""), [&](engine::MoeEngine& e) {
    if (std::filesystem::exists(r.out_dir) && !std::filesystem::is_directory(r.out_dir))
      throw Error(fmt::format("moqae sweep: --out {} is a file, expected a folder", r.out_dir));
    for (double lambda : r.lambdas)
      checkFileTarget(routerPath(lambda), "moqae sweep: --out", r.replace_existing, e, {r.train.text, r.eval_text});
    checkFileTarget(summary_path, "moqae sweep: --out", r.replace_existing, e, {r.train.text, r.eval_text});
  });
  engine::MoeEngine& engine = *p.engine;
  const std::vector<int32_t> eval_ids =
      engine::loadEvaluationIds(r.train.model, r.eval_text, "", engine.config().bos_token_id, false);

  MoqaeSweepResult result;
  result.model = engine.checkpoint().root();
  result.context = r.context > 0 ? r.context : engine::defaultKvContext(engine.checkpoint());
  result.table_seconds = p.table.seconds;
  for (const auto& c : p.untrained.configs) result.configs.push_back(c.spec);
  std::filesystem::create_directories(r.out_dir);

  const std::size_t evals = r.baselines.size() + r.lambdas.size();
  std::size_t done = 0;
  auto evaluate = [&](const std::shared_ptr<const engine::KvCachePolicy>& policy, MoqaeSweepRow& row) {
    const auto t0 = std::chrono::steady_clock::now();
    const double begin = table_share + train_share + (1 - table_share - train_share) * double(done) / double(evals);
    engine.setKvCachePolicy(policy);
    const engine::PerplexityResult ppl = engine::evaluatePerplexity(
        engine, eval_ids, r.eval,
        slice(progress, begin, (1 - table_share - train_share) / double(evals), "eval " + row.variant + ": "));
    engine.setKvCachePolicy(nullptr);
    const nlohmann::json report = engine::kvCacheReport(engine.config(), *policy,
                                                        {ppl.stats.kv_stored_bits, ppl.stats.kv_elements},
                                                        r.eval.seq_len, result.context);
    row.ppl = ppl.ppl;
    row.nll = ppl.nll;
    row.avg_bits = report["kv_avg_bits"].get<double>();
    row.kv_bytes = report["kv_bytes"].get<uint64_t>();
    row.kv_bytes_at_context = report["kv_bytes_at_context"].get<uint64_t>();
    result.eval_seconds += secondsSince(t0);
    ++done;
  };
  for (const auto& b : r.baselines) {
    MoqaeSweepRow row;
    row.variant = b;
    evaluate(engine::makeKvCachePolicy(b), row);
    result.rows.push_back(std::move(row));
  }
  for (std::size_t i = 0; i < r.lambdas.size(); ++i) {
    MoqaeTrainRequest tr = r.train;
    tr.training.lambda = r.lambdas[i];
    auto set = std::make_shared<mq::RouterSet>();
    const mq::TrainingResult t =
        train(tr, p, *set, slice(progress, table_share + train_share * double(i) / double(r.lambdas.size()),
                                 train_share / double(r.lambdas.size()), fmt::format("train λ={}: ", r.lambdas[i])));
    result.train_seconds += t.seconds;
    MoqaeSweepRow row;
    row.lambda = r.lambdas[i];
    row.variant = fmt::format("moqae λ={}", r.lambdas[i]);
    row.router = routerPath(r.lambdas[i]);
    row.estimate = t.after.toJson(*set);
    mq::saveRouterSet(*set, row.router);
    auto policy = std::make_shared<mq::MoqaePolicy>(set, "moqae:" + row.router);
    evaluate(policy, row);
    row.chunks_per_config = policy->tally();
    result.rows.push_back(std::move(row));
  }
  writeFileAtomically(summary_path, result.toJson().dump(1) + "\n");
  return result;
}

}  // namespace moewb::jobs

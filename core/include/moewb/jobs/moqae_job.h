// SPDX-License-Identifier: MIT
#pragma once
// MoQAE's long work as request objects: `moewb moqae train` (cost table + router training, written to a
// ROUTER.json) and `moewb moqae sweep` (one router per λ on one shared cost table, then perplexity, average
// bits and KV bytes of each next to the uniform baselines). The GUI can build the same requests.
#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moewb/engine/engine.h"
#include "moewb/engine/evaluate.h"
#include "moewb/methods/moqae.h"
#include "moewb/methods/moqae_training.h"
#include "moewb/progress.h"

namespace moewb::jobs {

struct MoqaeTrainRequest {
  std::string model;  // checkpoint folder
  std::string text;   // calibration text, tokenized as [bos] + encode(file)
  std::string configs = "fp16,int8,int4,int2";
  int chunk_tokens = 32, share = 3;
  bool freeze = true;
  methods::moqae::CostTableOptions table;      // seq_len, windows
  methods::moqae::TrainingOptions training;    // lambda, loss, steps, batch, AdamW, seed
  std::string out;                             // ROUTER.json ("" : not written)
  bool replace_existing = false;               // --force
  std::function<void(engine::MoeEngine&)> on_engine;
};

struct MoqaeTrainResult {
  methods::moqae::RouterSet routers;  // with `training` filled (settings, loss curve, estimates)
  methods::moqae::TrainingResult training;
  double table_seconds = 0;
};

MoqaeTrainResult runMoqaeTrainJob(const MoqaeTrainRequest& request, const ProgressFn& progress = {});

struct MoqaeSweepRequest {
  MoqaeTrainRequest train;  // its out and training.lambda are set per λ
  std::vector<double> lambdas{0.1, 0.3, 0.5, 0.7, 0.9};
  std::vector<std::string> baselines{"fp16", "int8", "int4", "int2"};
  std::string eval_text;
  engine::EvalOptions eval;  // seq_len, max_windows
  int64_t context = 0;       // bytes also reported at this length (0: max_position_embeddings, else 32768)
  std::string out_dir;       // router-lambda-L.json for each λ and sweep.json
  bool replace_existing = false;
};

struct MoqaeSweepRow {
  std::string variant;  // "fp16", "moqae λ=0.5"
  double lambda = std::numeric_limits<double>::quiet_NaN();  // NaN for a baseline
  double ppl = 0, nll = 0, avg_bits = 0;
  uint64_t kv_bytes = 0, kv_bytes_at_context = 0;
  std::string router;  // the ROUTER.json of a λ row
  nlohmann::json estimate;  // calibration estimate of a λ row (avg bits, delta NLL, shares)
  std::vector<std::vector<int64_t>> chunks_per_config;  // [layer][config] of a λ row, over the eval text
};

struct MoqaeSweepResult {
  std::string model;
  int64_t context = 0;
  double table_seconds = 0, train_seconds = 0, eval_seconds = 0;
  std::vector<std::string> configs;
  std::vector<MoqaeSweepRow> rows;  // baselines first, then λ in the order given
  nlohmann::json toJson() const;
};

MoqaeSweepResult runMoqaeSweepJob(const MoqaeSweepRequest& request, const ProgressFn& progress = {});

}  // namespace moewb::jobs

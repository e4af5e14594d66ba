// SPDX-License-Identifier: MIT
#pragma once
// K/V capture as one request object: `moewb kv` and the GUI's K/V view build a KvRequest and run it
// through runKvJob with the same progress/cancel contract.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "moewb/engine/engine.h"
#include "moewb/engine/kv_capture.h"
#include "moewb/engine/kv_stats.h"
#include "moewb/progress.h"

namespace moewb::jobs {

struct KvRequest {
  std::string model;  // checkpoint folder
  // The prompt: `prompt` (text), `text` (a file) or `ids` (token ids file); exactly one.
  std::string prompt, text, ids;
  bool no_bos = false;
  int max_tokens = 512;  // the prompt is truncated to this many tokens
  int first_tokens = 4;  // keys counted as "first tokens" (attention sinks)
  double outlier_factor = engine::kDefaultOutlierFactor;
  std::string out;  // also save the capture here (safetensors, kv_capture.h), "" for none
  // An existing non-empty `out` is replaced only with this (--force), never a file the run reads
  // (moewb/output_target.h); checked before the capture.
  bool replace_existing = false;
  std::function<void(engine::MoeEngine&)> on_engine;  // called once the engine is open (the CLI's --device)
};

struct KvJobResult {
  std::string model;                                 // checkpoint root
  std::shared_ptr<const engine::KvCapture> capture;  // with decoded pieces when a tokenizer was used
  std::vector<double> sink_mass;                     // per layer: attention mass on the first tokens
  std::vector<engine::KvLayerChannels> channels;     // per layer (kv_stats.h's outlier definition)
};

// Tokenizes the prompt, captures K (after RoPE), V and the attention, decodes the pieces, computes the
// per-layer statistics and saves the capture when `out` is set (atomically). Returning false from
// `progress` throws moewb::Cancelled and nothing is written.
KvJobResult runKvJob(const KvRequest& request, const ProgressFn& progress = {});

}  // namespace moewb::jobs

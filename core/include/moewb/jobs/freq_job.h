// SPDX-License-Identifier: MIT
#pragma once
// Expert activation counting as one request object: `moewb freq` and the GUI's frequency view build a
// FreqRequest and run it through runFreqJob with the same progress/cancel contract.
#include <functional>
#include <string>

#include "moewb/engine/engine.h"
#include "moewb/engine/expert_frequency.h"
#include "moewb/progress.h"

namespace moewb::jobs {

struct FreqRequest {
  std::string model;      // checkpoint folder
  std::string text, ids;  // a text file or a token ids file, not both
  bool no_bos = false;
  int seq_len = 256;
  int max_windows = 0;                                // 0: every window
  std::function<void(engine::MoeEngine&)> on_engine;  // called once the engine is open (the CLI's --device)
};

// How often each expert of each MoE layer is among the top-k over all positions of the windows. A text
// shorter than one window is counted as one window of its own length; fewer than 2 tokens is an error.
// The result is the file format `moewb freq --json` prints (model root, the window length used).
engine::ExpertFrequencyFile runFreqJob(const FreqRequest& request, const ProgressFn& progress = {});

}  // namespace moewb::jobs

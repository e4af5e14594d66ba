// SPDX-License-Identifier: MIT
#pragma once
// Calibration through the engine: the inputs of chosen weight matrices during forward passes, reduced to
// their Hessians (moewb/quant/calibration.h) as they stream by, so no activation is kept.
#include <set>
#include <string>
#include <vector>

#include "moewb/engine/engine.h"
#include "moewb/engine/kernels.h"
#include "moewb/progress.h"
#include "moewb/quant/calibration.h"

namespace moewb::engine {

class HessianCollector final : public LinearInputTap {
 public:
  // Collects for the named matrices only, at most `max_tokens` rows each (0: every row; QMoE caps
  // an expert's tokens so a popular expert does not dominate memory and time).
  explicit HessianCollector(const std::vector<std::string>& matrices, int64_t max_tokens = 0);
  void onLinearInput(std::string_view matrix, const float* x, int64_t rows, int64_t cols) override;
  // The Hessians collected so far (symmetric), leaving the collector empty.
  quant::CalibrationSet take();

 private:
  std::set<std::string, std::less<>> wanted_;
  int64_t max_tokens_ = 0;
  quant::CalibrationSet hessians_;
};

struct CalibrationOptions {
  int seq_len = 256;          // tokens per window (the ids are cut into consecutive windows)
  int64_t max_tokens = 0;     // per matrix (0: all)
  int64_t batch_tokens = 4096;  // tokens per forward pass
};

// Runs `ids` through the engine in windows and returns the Hessians of `matrices`. Progress and cancel
// as everywhere (throws moewb::Cancelled).
quant::CalibrationSet collectHessians(const MoeEngine& engine, const std::vector<int32_t>& ids,
                                      const std::vector<std::string>& matrices, const CalibrationOptions& options,
                                      const ProgressFn& progress = {});

// float64 bytes the Hessians of these [rows, cols] matrices take (stated before a run).
int64_t hessianBytes(const std::vector<int64_t>& input_features);

}  // namespace moewb::engine

// SPDX-License-Identifier: MIT
#pragma once
// A quantization job as one request object: `moewb quantize` and the GUI's quantization and export jobs
// build a QuantizeRequest and run it through runQuantizeJob with the same progress/cancel contract, so
// the choice of matrices, ranks, calibration, device and export is made in one place.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/engine/calibration.h"
#include "moewb/progress.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/quant/rank_policy.h"

namespace moewb::jobs {

// What a quantization does with matrices that hold NaN/Inf weights (their error is not a number).
enum class NonFiniteMatrices {
  Stop,  // an error naming every such matrix; nothing is exported
  Skip,  // leave them unquantized (an export copies them as they are), named in a note
};

struct QuantizeRequest {
  std::shared_ptr<const ModelCatalog> catalog;
  quant::QuantizeSettings settings;  // a registered method with its options set (and seed, threads)
  // Which matrices: these catalog indices (empty: every quantizable one), of which the quantizable ones
  // matching `only` (a glob, '*' matches any run; empty: all) are kept.
  std::vector<std::size_t> matrices;
  std::string only;
  // Ranks of a rank-policy method: `ranks` per kept matrix when given (the GUI's assigned ranks),
  // otherwise from `budget` ("200MB") or `policy` (default "uniform-16") with `frequencies` when the
  // policy needs them. Giving a policy or budget to a method without ranks is an error.
  std::vector<int> ranks;
  std::string policy;
  std::string budget;
  std::optional<quant::ExpertFrequencies> frequencies;
  // Calibration text for a method that needs Hessians (tokenized with the model's tokenizer).
  std::string calibration_text;
  engine::CalibrationOptions calibration;
  // Where the calibration passes run (the GPU engine of app/common/engine_device_choice.h); nullptr: the
  // CPU engine.
  std::shared_ptr<engine::ForwardBackend> calibration_backend;
  quant::PipelineOptions pipeline;  // the backend (nullptr: CPU) and its batching
  // Export folder ("" for none) and whether it is a dequantized bf16 checkpoint. An existing non-empty
  // folder is replaced only when `replace_existing` (--force) and only when it is a previous moewb export
  // (moewb/output_target.h); the folder is checked, and its free space against the predicted export size,
  // before any work.
  std::string out;
  bool dequantized = false;
  bool replace_existing = false;
  NonFiniteMatrices nonfinite = NonFiniteMatrices::Stop;  // --nonfinite stop|skip
  // One-line notes for the user as they arise ("budget 32MB -> policy dense-16"); may be empty.
  std::function<void(const std::string&)> on_note;
  std::function<void(const quant::QuantizedMatrix&)> on_matrix_done;
  quant::IterationFn on_iteration;
};

struct QuantizeJobResult {
  quant::ModelQuantization quantization;  // its `policy` is the resolved policy text of a rank method
  std::vector<std::size_t> matrices;      // what was quantized (catalog indices)
};

// Checks the request (errors name the option at fault), resolves matrices and ranks, collects
// calibration when the method needs it, quantizes, and writes the export when `out` is set. Progress:
// calibration, quantization and export share the fraction; returning false throws moewb::Cancelled and
// nothing is written.
QuantizeJobResult runQuantizeJob(const QuantizeRequest& request, const ProgressFn& progress = {});

}  // namespace moewb::jobs

// SPDX-License-Identifier: MIT
#pragma once
// State shared by quantizeModel's two paths (the CPU's parallel loop in model_quantizer.cpp and the
// backend's streaming pipeline in batch_pipeline.cpp): work accounting, callbacks and the results.
#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "moewb/methods/weight_method.h"
#include "moewb/progress.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/quant/payload.h"

namespace moewb::quant::detail {

struct QuantizeRun {
  QuantizeRun(const MatrixSource& source_, const QuantizeSettings& settings_, const methods::WeightMethod& method_,
              const std::vector<std::size_t>& matrices_, const std::vector<int>& ranks_,
              const std::function<void(const QuantizedMatrix&)>& on_matrix_done_,
              const IterationFn& on_iteration_, ProgressReporter& reporter_, bool keep_payloads_,
              ModelQuantization& out_)
      : source(source_),
        settings(settings_),
        method(method_),
        matrices(matrices_),
        ranks(ranks_),
        on_matrix_done(on_matrix_done_),
        on_iteration(on_iteration_),
        reporter(reporter_),
        keep_payloads(keep_payloads_),
        out(out_) {}

  const MatrixSource& source;
  const QuantizeSettings& settings;
  const methods::WeightMethod& method;
  const std::vector<std::size_t>& matrices;  // catalog indices
  const std::vector<int>& ranks;             // per entry of `matrices` (MiLo)
  const std::function<void(const QuantizedMatrix&)>& on_matrix_done;
  const IterationFn& on_iteration;
  ProgressReporter& reporter;
  bool keep_payloads = true;
  ModelQuantization& out;
  const CalibrationSet* calibration = nullptr;  // for methods that need it
  double total_work = 0;             // elements of all matrices
  std::atomic<double> done_work{0};  // elements of the matrices stored so far
  std::mutex done_mutex, iteration_mutex;
  // Objects the payloads share (a dictionary), by identity: counted once in compressed_bytes.
  std::map<const void*, MatrixPayload::SharedPart> shared_parts;

  const WeightMatrix& matrix(std::size_t item) const { return source.matrices().at(matrices[item]); }
  int rankOf(std::size_t item) const { return method.usesRankPolicy() ? ranks[item] : 0; }
  double work(std::size_t item) const { return double(matrix(item).rows * matrix(item).cols); }
  uint64_t seedOf(std::size_t item) const { return matrixSeed(settings, matrices[item]); }
  // The item's Hessian, or nullptr (no calibration, or no token reached the matrix).
  const MatrixHessian* calibrationOf(std::size_t item) const {
    if (!calibration) return nullptr;
    const auto it = calibration->find(matrix(item).name);
    return it == calibration->end() ? nullptr : &it->second;
  }
  // Fraction done with `extra` elements of work in progress on top of what is stored.
  double fraction(double extra = 0) const { return std::min(1.0, (done_work.load() + extra) / total_work); }
  // Passes one MiLo iteration to on_iteration (serialised).
  void iteration(std::size_t item, int one_based, double error);
  // Item `item` is finished: fills in where it came from, hands it to on_matrix_done (serialised),
  // reports progress (throws Cancelled when the user stopped) and keeps it (or its report) in `out`.
  void finish(std::size_t item, QuantizedMatrix&& q);
};

// Drops what a result stores (payload, codes, factors) and keeps its report: runs with keep_payloads off.
void dropStoredForm(QuantizedMatrix& q);
// Quantizes `items` (indices into run.matrices) on the CPU, `threads` matrices at a time.
void quantizeOnCpu(QuantizeRun& run, const std::vector<std::size_t>& items, int threads);
// The backend pipeline: groups, batches, streams; unsupported matrices go to quantizeOnCpu.
void quantizeOnBackend(QuantizeRun& run, const PipelineOptions& options);

}  // namespace moewb::quant::detail

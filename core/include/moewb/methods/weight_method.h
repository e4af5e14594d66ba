// SPDX-License-Identifier: MIT
#pragma once
// One compression method for weight matrices, described once: its name, its options, what it needs, how
// it quantizes a matrix and how its result is stored. Every method is registered in the MethodRegistry
// (moewb/methods/registry.h); the CLI, the GUI, quick specs, export/import and the GPU backend iterate
// the registry instead of naming methods.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "moewb/methods/options.h"
#include "moewb/quant/calibration.h"
#include "moewb/quant/model_quantizer.h"

namespace moewb::methods {

// What a method needs besides the weights of the matrix it quantizes.
enum class MethodNeeds : unsigned char {
  WeightsOnly,          // calibration-free (RTN, HQQ, MiLo)
  CalibrationHessians,  // H = 2 X^T X of each matrix's inputs on calibration text (GPTQ, QMoE)
};

// How a quantized matrix is stored (docs/export-format.md). GroupedCodes fill QuantizedMatrix's grouped
// fields (base, u, v); the others set its `payload` (moewb/quant/payload.h), whose kind name the
// manifest records and whose registered reader rebuilds it.
enum class PayloadKind : unsigned char {
  GroupedCodes,  // integer codes in groups with fp16 scales and zeros, optional low-rank factors
  Codebook,      // product-quantized codes with residual stages ("codebook": QET, PQ)
  Dictionary,    // dictionary-coded ternary codes ("dictionary": QMoE)
};

// Bytes a matrix will take before it is quantized (policy previews and budgets).
struct PredictedSize {
  int64_t base = 0;         // codes, scales, zeros
  int64_t compensator = 0;  // low-rank factors
};

// Called after each iteration of an iterative method (0-based iteration, relative error); returning
// false cancels (the method throws moewb::Cancelled).
using IterationCallback = std::function<bool(int, double)>;

class WeightMethod {
 public:
  virtual ~WeightMethod() = default;
  virtual std::string_view name() const = 0;   // "milo": --method, specs, manifests, project files
  virtual std::string_view title() const = 0;  // "MiLo (HQQ + low-rank compensators)": the GUI's list
  virtual std::string_view summary() const = 0;  // one line for `moewb quantize --help`
  virtual const std::vector<OptionSpec>& options() const = 0;
  // Quick-spec fields without a key, in order ("hqq:3" sets bits). A field named "policy" is the rank
  // policy of a method that usesRankPolicy().
  virtual std::vector<std::string> specPositionals() const { return {}; }
  virtual MethodNeeds needs() const { return MethodNeeds::WeightsOnly; }
  virtual PayloadKind payloadKind() const { return PayloadKind::GroupedCodes; }
  // Ranks per matrix come from a rank policy (--policy, --budget, the policy editor).
  virtual bool usesRankPolicy() const { return false; }
  // A BatchBackend on this device can compute it (compute/storeComputed below).
  virtual bool runsOnGpu() const { return false; }

  // Checks the settings as a whole (options were checked one by one already); throws moewb::Error.
  virtual void validate(const quant::QuantizeSettings& settings) const = 0;
  virtual PredictedSize predictedSize(const quant::QuantizeSettings& settings, int64_t rows, int64_t cols,
                                      int rank) const = 0;
  // Quantizes one float matrix [out, in] on the CPU. `threads` parallelises inside the matrix; `seed`
  // drives any randomized step; `rank` is the policy's rank (0 unless usesRankPolicy()). `calibration` is
  // the matrix's Hessian for a method that needs() it, nullptr when the matrix saw no calibration token
  // (an expert no token was routed to: the method decides, and reports, what it does then).
  virtual quant::QuantizedMatrix quantize(const MatrixRM& w, const quant::QuantizeSettings& settings,
                                          int rank, uint64_t seed, int threads,
                                          const IterationCallback& on_iteration,
                                          const quant::MatrixHessian* calibration) const = 0;
  // The two halves of quantize() for methods whose codes a BatchBackend can compute: what the CPU
  // computes, and how either result is stored (so the GPU path stores exactly as the CPU path).
  virtual quant::ComputedMatrix compute(const MatrixRM& w, const quant::QuantizeSettings& settings,
                                        int rank, uint64_t seed, int threads,
                                        const IterationCallback& on_iteration) const;
  virtual quant::QuantizedMatrix storeComputed(const MatrixRM& w, const quant::QuantizeSettings& settings,
                                               int rank, quant::ComputedMatrix&& computed) const;
  // A step over the whole model, for a method whose stored form depends on every matrix at once
  // (qmoe-sub1 learns one dictionary from all matrices' codes and re-encodes each matrix with it).
  // When hasModelStep(), quantizeModel calls finishModel once, on its own thread, after every matrix
  // was quantized (CPU or backend) and before the model's sizes are totalled; it keeps the payloads
  // until then even when PipelineOptions::keep_payloads is false (and drops them after). The step may
  // replace payloads, `bytes` and `measures` but must not change what a matrix decodes to: on_matrix_done
  // and the GUI saw each matrix's result (errors included) before it. `progress` (fraction of the step,
  // stage) returns false to cancel (throw moewb::Cancelled).
  virtual bool hasModelStep() const { return false; }
  virtual void finishModel(quant::ModelQuantization& /*model*/, const ProgressFn& /*progress*/) const {}

  // The "settings" object of an export's manifest.
  virtual nlohmann::json settingsJson(const quant::QuantizeSettings& settings) const;

  // The option called `name`, or nullptr.
  const OptionSpec* option(std::string_view name) const;
  // Settings with every option at its default (method set).
  quant::QuantizeSettings defaults() const;
};

}  // namespace moewb::methods

// SPDX-License-Identifier: MIT
#pragma once
// The seam between quantizeModel and an accelerator (docs/gpu-quantization.md). A backend quantizes a
// batch of same-shape matrices with one method and one rank in one call (as QMoE batches GPTQ over the
// experts of a layer); quantizeModel groups, streams and stores. Core knows no CUDA: the GPU
// implementation lives in gpu/ (moewb/gpu/quant_backend.h), tests use a fake one.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/quant/grouped_quant.h"

namespace moewb::quant {

struct QuantizeSettings;

// Where the user asked the quantization to run (`moewb quantize --device`, the GUI's choice).
enum class ComputeDevice : uint8_t { Auto, Cpu, Cuda };
std::string_view computeDeviceName(ComputeDevice d);  // "auto", "cpu", "cuda"
std::optional<ComputeDevice> parseComputeDevice(std::string_view s);

// What a backend computes for one matrix, before storage. quantizeModel stores it exactly as the CPU
// path stores its own (compensators quantized to the chosen format on the CPU, errors measured on what
// is stored), so exports and the GUI cannot tell the paths apart.
struct ComputedMatrix {
  GroupedQuantized base;      // codes and fp16-exact scales/zeros of the kept iterate
  MatrixRM u, v;              // MiLo: fp32 factors [rows, rank], [rank, cols]; empty otherwise
  std::vector<double> curve;  // MiLo: ||W - dequant(Q) - UV|| / ||W|| after each iteration (may be empty)
  int best_iteration = -1;    // index into curve of the kept iterate; -1: the last
};

// One call: matrices of one shape, quantized with `settings` (one method) and one rank.
struct BatchRequest {
  const QuantizeSettings* settings = nullptr;
  int64_t rows = 0, cols = 0;
  int rank = 0;                          // MiLo compensator rank (0 for RTN/HQQ)
  std::vector<const MatrixRM*> weights;  // host, float [rows, cols] each
  std::vector<uint64_t> seeds;           // per matrix: settings.seed + 1000003 * catalog index, as the CPU
  std::vector<std::string> names;        // tensor names, for error messages
};

// Seconds one call spent in each stage (wall clock of the calling thread).
struct BatchTimings {
  double upload = 0;    // host staging and host-to-device copies
  double compute = 0;   // the quantizer itself
  double download = 0;  // device-to-host copies and unpacking
};

class BatchBackend {
 public:
  virtual ~BatchBackend() = default;
  // "cuda (NVIDIA H100 80GB HBM3)": what the reports say ran the work.
  virtual std::string name() const = 0;
  // "" when the backend quantizes such matrices, otherwise why not (the matrices then run on the CPU
  // and the reason goes into ModelQuantization::fallbacks).
  virtual std::string unsupportedReason(const QuantizeSettings& settings, int64_t rows, int64_t cols,
                                        int rank) const = 0;
  // Bytes one call may use (free GPU memory less a reserve), and what one matrix of a batch needs of it:
  // quantizeModel sizes batches from these. Asked once per run, before the first call.
  virtual int64_t memoryBudget() const = 0;
  virtual int64_t bytesPerMatrix(const QuantizeSettings& settings, int64_t rows, int64_t cols,
                                 int rank) const = 0;
  // Results in the order of request.weights. Throws moewb::Error naming the tensors on failure.
  virtual std::vector<ComputedMatrix> quantize(const BatchRequest& request, BatchTimings* timings) = 0;
};

}  // namespace moewb::quant

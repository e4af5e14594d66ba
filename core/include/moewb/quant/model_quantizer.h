// SPDX-License-Identifier: MIT
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/methods/options.h"
#include "moewb/progress.h"
#include "moewb/quant/batch_backend.h"
#include "moewb/quant/calibration.h"
#include "moewb/quant/matrix_source.h"
#include "moewb/quant/milo.h"
#include "moewb/quant/rank_policy.h"

namespace moewb::quant {

class MatrixPayload;  // moewb/quant/payload.h

struct QuantizeSettings {
  std::string method = "hqq";    // a name in the method registry (moewb/methods/registry.h)
  GroupedQuantSettings grouped;  // rtn, hqq, milo: bits and group of the base weights
  HqqOptions hqq;                // method HQQ
  MiloOptions milo;   // MiLo loop (its own HQQ options); `rank` is ignored: ranks come from the policy
  methods::OptionValues extra;  // options of methods without fields here, by option name
  uint64_t seed = 0;  // randomized SVD: matrix i uses seed + 1000003 * i
  int threads = 0;    // tensors quantized in parallel (0: workerThreads())
};

// One quantized weight matrix, kept in memory: everything needed to dequantize it, and its report line.
struct QuantizedMatrix {
  std::size_t matrix = 0;  // index into ModelCatalog::matrices()
  WeightMatrix source;     // name, tensor, slice, shape
  std::string method = "hqq";  // registry name of the method that made it
  GroupedQuantized base;
  std::optional<QuantizedFactor> u, v;  // MiLo compensators as stored (rank > 0)
  // A stored form other than grouped codes (codebook, dictionary, ...): when set it IS what is stored,
  // `base` is empty and `u`, `v` are unset; `bytes` is payload->storedBytes().
  std::shared_ptr<const MatrixPayload> payload;
  int rank = 0;
  double rel_error = 0;                     // ||W - W^|| / ||W|| of what is stored
  double rel_error_float_compensators = 0;  // MiLo: the same with U, V unquantized (fp32)
  double kurtosis = 0;                      // excess kurtosis of W
  int64_t bytes = 0;                        // stored bytes: packed codes + fp16 scales/zeros + compensators
  int64_t compensator_bytes = 0;
  int64_t original_bytes = 0;  // bytes of the matrix in the checkpoint
  std::vector<double> curve;   // MiLo error per iteration
  // Set when the method could not apply its own algorithm to this matrix and stored something simpler
  // ("rtn: no calibration token reached this matrix"): what it did, a colon, why. Never silent: the
  // manifest, `moewb quantize` (--json and a summary line) and the GUI report it per matrix.
  std::string fallback;
  // Method-specific measurements of this matrix by name ("zero_fraction", "output_rel_error"),
  // reported with it in the manifest and --json.
  std::map<std::string, double> measures;
};

// W^ as float [out, in]: the payload's dequantization when there is one, else dequantized base plus U^ V^.
MatrixRM dequantize(const QuantizedMatrix& q);

// Tensors the quantizers touch: 2-D weights of attention, dense MLPs, routed and shared experts
// (not embeddings, the LM head, routers, norms, biases or shared-expert gates).
bool isQuantizable(const TensorClass& c);
std::vector<std::size_t> quantizableMatrices(const ModelCatalog& catalog);
std::vector<std::size_t> quantizableMatrices(const MatrixSource& source);

// Facts for rank policies (kurtosis computed from the stored weights when `with_kurtosis`).
std::vector<MatrixFacts> matrixFacts(const ModelCatalog& catalog, const std::vector<std::size_t>& matrices,
                                     bool with_kurtosis, int threads = 0);
std::vector<MatrixFacts> matrixFacts(const MatrixSource& source, const std::vector<std::size_t>& matrices,
                                     bool with_kurtosis, int threads = 0);
double excessKurtosis(const MatrixRM& w);

// Bytes the model needs besides the quantized matrices' bases (untouched tensors, whole) and the bases
// themselves: what a budget must cover before any compensator.
int64_t fixedBytes(const ModelCatalog& catalog, const std::vector<std::size_t>& matrices,
                   const GroupedQuantSettings& grouped);

// Ranks of a policy for `matrices` (reads the weights for kurtosis only when the policy needs it).
std::vector<int> ranksForPolicy(const ModelCatalog& catalog, const std::vector<std::size_t>& matrices,
                                const RankPolicy& policy, const ExpertFrequencies* frequencies = nullptr,
                                int threads = 0);
std::vector<int> ranksForPolicy(const MatrixSource& source, const std::vector<std::size_t>& matrices,
                                const RankPolicy& policy, const ExpertFrequencies* frequencies = nullptr,
                                int threads = 0);

// What a policy will cost before anything is quantized (the GUI's policy editor, `--budget`).
struct PolicyPreview {
  struct Row {
    std::string name;
    int rank = 0;
    int64_t base_bytes = 0;  // packed codes + fp16 scales and zeros
    int64_t compensator_bytes = 0;
    int64_t original_bytes = 0;
  };
  std::vector<Row> rows;         // same order as `matrices`
  int64_t original_bytes = 0;    // whole checkpoint
  int64_t compressed_bytes = 0;  // whole model after quantization with these ranks
};
PolicyPreview previewPolicy(const ModelCatalog& catalog, const std::vector<std::size_t>& matrices,
                            const std::vector<int>& ranks, const QuantizeSettings& settings);

// How quantizeModel runs, besides what it computes (docs/gpu-quantization.md).
struct PipelineOptions {
  // nullptr: every matrix on the CPU, `settings.threads` at a time. Otherwise matrices of one shape and
  // rank go to the backend in batches, streamed: batch i+1 is read while batch i is quantized and
  // batch i-1 is stored; what the backend does not support runs on the CPU afterwards.
  BatchBackend* backend = nullptr;
  int max_batch = 32;                          // matrices per backend call at most (0: memory decides)
  int64_t max_batch_bytes = int64_t(2) << 30;  // float32 host bytes of one batch (three are in flight)
  // false: a result goes to on_matrix_done, then only its report (name, rank, errors, bytes, curve)
  // is kept, not its codes and factors: for runs whose quantized model need not stay in memory. (A
  // method with a model step, WeightMethod::hasModelStep, keeps them until that step has run.)
  bool keep_payloads = true;
  // Hessians of the matrices' inputs (engine::collectHessians) for a method that needs calibration; a
  // matrix without an entry saw no calibration token.
  const CalibrationSet* calibration = nullptr;
};

// Where the time of a backend run went (seconds; zero on the CPU path).
struct PipelineTimings {
  double read = 0;                               // reading (or generating) float32 matrices
  double upload = 0, compute = 0, download = 0;  // inside the backend
  double store = 0;                              // compensator storage, errors, callbacks on the CPU
  double waiting_for_input = 0;                  // the backend idle until the next batch was read
  int batches = 0;
  int largest_batch = 0;  // matrices in the largest backend call
  double backendSeconds() const { return upload + compute + download; }
};

struct ModelQuantization {
  QuantizeSettings settings;
  std::string policy;                     // canonical policy text ("" for RTN/HQQ)
  std::vector<QuantizedMatrix> matrices;  // in the order of the `matrices` argument
  int64_t original_bytes = 0;             // whole checkpoint
  // Quantized matrices as stored + untouched tensors + objects the payloads share (a dictionary),
  // each counted once (sharedPayloadBytes in moewb/quant/payload.h).
  int64_t compressed_bytes = 0;
  double seconds = 0;
  std::string device = "cpu";          // "cpu" or the backend's name
  std::size_t backend_matrices = 0;    // how many the backend quantized (the rest ran on the CPU)
  std::vector<std::string> fallbacks;  // "3 matrices on the CPU: <why the backend could not>"
  PipelineTimings timings;
};

// Quantizes `matrices` (indices into catalog.matrices()) with `ranks[i]` for matrix i (MiLo; ignored
// otherwise), tensors in parallel. `progress` gets (done fraction, "NAME: stage") and may cancel
// (throws moewb::Cancelled; nothing is kept); `on_matrix_done` receives each result as it finishes
// (serialised, from a worker thread). `on_iteration` receives every MiLo iteration of every matrix
// (matrix index into catalog.matrices(), 1-based iteration, error): unlike progress reports, which are
// advisory and may be skipped while another thread reports, none is dropped (serialised, worker thread).
// Deterministic for a given seed whatever the thread count. Progress never goes backwards and ends
// at 1. With a backend (`options`): every matrix's iterations are reported when its batch comes back,
// results are deterministic for a given seed, device and batch plan, and the fraction advances as
// batches are stored.
using IterationFn = std::function<void(std::size_t matrix, int iteration, double error)>;
ModelQuantization quantizeModel(const ModelCatalog& catalog, const QuantizeSettings& settings,
                                const std::vector<std::size_t>& matrices, const std::vector<int>& ranks,
                                const ProgressFn& progress = {},
                                const std::function<void(const QuantizedMatrix&)>& on_matrix_done = {},
                                const IterationFn& on_iteration = {}, const PipelineOptions& options = {});
// The same over any source (`matrices` index into source.matrices()).
ModelQuantization quantizeModel(const MatrixSource& source, const QuantizeSettings& settings,
                                const std::vector<std::size_t>& matrices, const std::vector<int>& ranks,
                                const ProgressFn& progress = {},
                                const std::function<void(const QuantizedMatrix&)>& on_matrix_done = {},
                                const IterationFn& on_iteration = {}, const PipelineOptions& options = {});

// Seed of matrix `catalog_index`'s randomized steps, on every path.
uint64_t matrixSeed(const QuantizeSettings& settings, std::size_t catalog_index);

// Quantizes one float matrix as quantizeModel does for each tensor (used by it, the analysis views and
// benchmarks). `threads` parallelises inside the matrix.
QuantizedMatrix quantizeMatrix(const MatrixRM& w, const QuantizeSettings& settings, int rank, uint64_t seed,
                               int threads = 1, const std::function<bool(int, double)>& on_iteration = {},
                               const MatrixHessian* calibration = nullptr);
// Its two halves: what the CPU computes (what a BatchBackend computes instead)...
ComputedMatrix computeMatrix(const MatrixRM& w, const QuantizeSettings& settings, int rank, uint64_t seed,
                             int threads = 1, const std::function<bool(int, double)>& on_iteration = {});
// ...and how either is stored: compensators in settings.milo.compensator format, errors of what is
// stored, kurtosis and bytes. `source`, `matrix` and `original_bytes` are left for the caller.
QuantizedMatrix storeMatrix(const MatrixRM& w, const QuantizeSettings& settings, int rank,
                            ComputedMatrix&& c);

}  // namespace moewb::quant

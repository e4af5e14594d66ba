// SPDX-License-Identifier: MIT
#pragma once
// QET (Quantum Entanglement Trees, issue #37): a per-row element reorder ("entanglement") that makes
// neighbouring elements locally ordered, product quantization of the reordered matrix with FAISS k-means,
// a residual stage (RQO) and a'-bit codebooks (CQO), with every stored part counted.
//
// Entanglement of one row of n elements, l levels: the pairs (x[2j], x[2j+1]) are split into S (the
// smaller of each pair) and L (the larger), with one indicator bit per pair (1: the left one was the
// smaller); the row becomes [S | L] and each half is split again, l times in all. Level t stores n/2 bits
// per row (its 2^t blocks' bits, block after block), so l levels take l*n/2 bits per row. Merging from
// level l back to 1 with the same bits returns the row bit for bit.
//
// Stored form: the "qet" payload kind (docs/export-format.md): per stage, its indicator bits and one
// codebook payload (moewb/quant/payloads/codebook.h) over the reordered residual; W^ is the sum over
// stages of each stage's merged (un-reordered) codebook reconstruction.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/quant/payload.h"
#include "moewb/quant/payloads/codebook.h"

namespace moewb::methods::qet {

// ---- entanglement --------------------------------------------------------------------------------------
// Indicator bits per row of `cols` elements over `levels` levels (cols must be divisible by 2^levels).
int64_t indicatorBitsPerRow(int64_t cols, int levels);
// The reordered matrix and its indicator bits [rows, indicatorBitsPerRow] row-major (one 0/1 per byte).
struct Entangled {
  MatrixRM reordered;
  std::vector<uint8_t> bits;
};
// Throws moewb::Error when cols is not divisible by 2^levels.
Entangled entangle(const MatrixRM& x, int levels);
// The inverse: merges `reordered` back with the indicator bits.
MatrixRM disentangle(const MatrixRM& reordered, int levels, std::span<const uint8_t> bits);

// ---- settings and the memory plan ----------------------------------------------------------------------
struct Config {
  int levels = 3;                  // entanglement levels of the first stage (0: plain PQ)
  int stages = 2;                  // 1 + residual stages (RQO); residual stages are not reordered
  double first_stage_share = 0.7;  // share of the memory left after the indicator maps for stage 0
  int subspace_width = 8;          // d: columns per subspace
  int codebook_bits = 10;          // a' (2..16; CQO), or 0 for fp16 codebooks
  double ratio = 4;                // theta = original bytes / everything stored
  int original_bits = 32;          // bits per element the original is counted at
  int kmeans_iters = 20;
};

struct StagePlan {
  int levels = 0;
  int clusters = 0;
  int codebook_bits = 0;
  int64_t indicator_bytes = 0, code_bytes = 0, codebook_bytes = 0;
  int64_t bytes() const { return indicator_bytes + code_bytes + codebook_bytes; }
};
struct Plan {
  int64_t original_bytes = 0;  // rows * cols * original_bits / 8
  int64_t budget_bytes = 0;    // original_bytes / ratio
  std::vector<StagePlan> stages;
  int64_t totalBytes() const;
  double achievedRatio() const { return double(original_bytes) / double(totalBytes()); }
};
// Bytes of one stage as the "qet" payload stores it (packed indicators, packed codes, codebook + scales).
StagePlan stageBytes(int64_t rows, int64_t cols, int subspace_width, int clusters, int codebook_bits,
                     int levels);
// The cluster counts: the largest k of each stage (bisection; k <= min(rows, 65536)) whose bytes fit its
// share, stage 0's k lowered by a few steps where that lets the last stage fill the budget closer.
// Throws moewb::Error when the budget cannot hold the indicator maps plus two clusters per stage, or the
// shape does not fit (cols % d, cols % 2^levels).
Plan plan(int64_t rows, int64_t cols, const Config& config);

// ---- the stored form -----------------------------------------------------------------------------------
struct PayloadStage {
  int levels = 0;
  std::vector<uint32_t> indicators;  // [rows, indicatorBitsPerRow] flattened, packed 32 bits per word
  std::shared_ptr<const quant::CodebookPayload> codebook;  // one stage, over the reordered residual
};

class QetPayload final : public quant::MatrixPayload {
 public:
  static constexpr std::string_view kKind = "qet";
  // Throws moewb::Error when the parts do not fit together.
  QetPayload(int64_t rows, int64_t cols, std::vector<PayloadStage> stages);
  std::string_view kind() const override { return kKind; }
  int64_t rows() const override { return rows_; }
  int64_t cols() const override { return cols_; }
  const std::vector<PayloadStage>& stages() const { return stages_; }
  MatrixRM dequantize() const override;
  int64_t storedBytes() const override;
  void write(quant::PayloadWriter& writer, const std::string& key, nlohmann::json& entry) const override;
  int64_t indicatorBytes(std::size_t stage) const;  // 4 * words

 private:
  int64_t rows_, cols_;
  std::vector<PayloadStage> stages_;
};

// The reader of kind "qet" (registered when the method's code is linked).
std::shared_ptr<const quant::MatrixPayload> readQetPayload(const quant::PayloadSource& source,
                                                           const std::string& key,
                                                           const nlohmann::json& entry);

// OpenMP threads FAISS uses on the calling thread while this lives (n <= 0: leave the default). The
// setting is per thread in OpenMP, so matrices quantized in parallel each choose their own.
class FaissThreads {
 public:
  explicit FaissThreads(int n);
  ~FaissThreads();
  FaissThreads(const FaissThreads&) = delete;
  FaissThreads& operator=(const FaissThreads&) = delete;

 private:
  int saved_ = 0;
};

// ---- quantization --------------------------------------------------------------------------------------
// Returns false to cancel (the work throws moewb::Cancelled at its next check).
using KeepGoing = std::function<bool()>;

// QET of one matrix with the plan's cluster counts. `seed` drives the k-means initialisation.
std::shared_ptr<const QetPayload> quantize(const MatrixRM& w, const Config& config, uint64_t seed,
                                           const KeepGoing& keep_going = {});

// Product quantization with FAISS k-means (faiss::Clustering) per subspace of d columns: centroids
// [m, k, d], and codes [rows, m] of each row's nearest centroid.
std::vector<float> trainSubspaceCentroids(const MatrixRM& x, int subspace_width, int clusters, int iters,
                                          uint64_t seed, const KeepGoing& keep_going = {});
std::vector<uint16_t> assignSubspaceCodes(const MatrixRM& x, int subspace_width, int clusters,
                                          std::span<const float> centroids);
MatrixRM reconstructSubspaces(int64_t rows, int64_t cols, int subspace_width, int clusters,
                              std::span<const float> centroids, std::span<const uint16_t> codes);

// ---- baselines at equal memory (the `moewb qet` table) -------------------------------------------------
struct Reconstruction {
  std::string method;    // "qet", "qet-vanilla", "qet+cqo", "qet+rqo", "rtn", "rtn-global", "pq", "opq"
  bool skipped = false;  // nothing of this method fits the budget
  std::string note;      // why skipped, or what was chosen ("k=329", "4-bit groups of 8")
  MatrixRM w;            // W^ (empty when skipped)
  int64_t bytes = 0;     // everything stored
  double quantize_seconds = 0, dequantize_seconds = 0;
};
// RTN of the project (grouped codes with fp16 scale and zero) with the widest bits and smallest group
// whose bytes fit the budget.
Reconstruction rtnAtBudget(const MatrixRM& w, int64_t budget_bytes);
// The QET paper's RTN baseline: one min and step (float) for the whole matrix, the widest bits that fit.
Reconstruction rtnGlobalAtBudget(const MatrixRM& w, int64_t budget_bytes);
// PQ (FAISS k-means per subspace, codebooks stored at original_bits per value) at the largest k that fits.
Reconstruction pqAtBudget(const MatrixRM& w, int64_t budget_bytes, int subspace_width, int original_bits,
                          int iters, uint64_t seed, const KeepGoing& keep_going = {});
// OPQ: FAISS OPQMatrix's rotation (cols x cols at original_bits per value, counted) then PQ of the rotated
// matrix in what is left; skipped when the rotation leaves no room.
Reconstruction opqAtBudget(const MatrixRM& w, int64_t budget_bytes, int subspace_width, int original_bits,
                           int iters, uint64_t seed, const KeepGoing& keep_going = {});
// QET with `config` (its ablations are configs: vanilla = 1 stage fp16, +cqo = 1 stage a' bits, +rqo =
// 2 stages fp16), timed, dequantized through the payload.
Reconstruction qetReconstruction(const std::string& name, const MatrixRM& w, const Config& config,
                                 uint64_t seed, const KeepGoing& keep_going = {});

// The paper's synthetic sets 1..3: 1024 x {128, 512, 1024}, a normal of mean 0.5 and sigma 0.16
// truncated to [0, 1], each element with probability 1e-4 replaced by an outlier uniform in [-100, 100].
MatrixRM syntheticSet(int set, uint64_t seed);

}  // namespace moewb::methods::qet

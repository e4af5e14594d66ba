// SPDX-License-Identifier: MIT
#pragma once
// GPTQ (Frantar et al., 2022) for one weight matrix W [rows, cols] and the Hessian H = 2 X^T X of its
// inputs: columns are rounded one at a time to a grid, and each column's rounding error is spread over
// the columns not yet rounded through the Cholesky factor of H^-1, so the layer's output error
// ||(W - W^) X|| is what is minimised, not ||W - W^||. The grid is a plug-in (ColumnGrid): uniform
// asymmetric codes in groups (method gptq) or QMoE's ternary rows (method qmoe-ternary).
//
// The standard algorithm: dead inputs (H_jj = 0) get H_jj = 1 and W_:j = 0; optional act-order (columns
// by decreasing H_jj); damping lambda * mean(diag H); U = upper Cholesky factor of (H + damping)^-1;
// columns in blocks of 128 whose errors reach the columns after the block in one product ("lazy batch
// updates"). Float64 for H, its inverse and factor; float32 for the weights being updated.
#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/quant/grouped_quant.h"

namespace moewb::methods::gptq {

using MatrixCM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;

// The grid GPTQ rounds to, column by column. Columns are named by their index in the original order
// (act-order permutes the processing order, never the stored order).
class ColumnGrid {
 public:
  virtual ~ColumnGrid() = default;
  // Called once before any column, with the weights GPTQ starts from (dead inputs zeroed): parameters
  // fixed for the whole matrix (per-row ranges, or every group's range under act-order) are chosen here.
  virtual void prepare(const MatrixCM& w) = 0;
  // > 0: parameters of each run of this many consecutive columns are chosen from the current, error-
  // updated weights when GPTQ reaches the run's first column (startGroup). 0: all chosen in prepare().
  virtual int64_t dynamicGroup() const { return 0; }
  // The current weights of the columns [first, first + w.cols()).
  virtual void startGroup(int64_t /*first*/, const Eigen::Ref<const MatrixCM>& /*w*/) {}
  // Rounds the current values `w` [rows] of column `col`: records the codes and writes the values they
  // stand for to `q` [rows].
  virtual void quantizeColumn(int64_t col, const float* w, float* q) = 0;
};

struct SolverOptions {
  double damp = 0.01;     // lambda: lambda * mean(diag H) is added to H's diagonal
  double max_damp = 1.0;  // a failed Cholesky is retried with 10x lambda while lambda stays <= this
  int64_t block = 128;    // columns per lazy batch update
  bool act_order = false;
};

struct SolverResult {
  bool solved = false;  // false: nothing usable came out (the grid must be filled another way)
  std::string failure;  // why not, for the report
  double damp = 0;      // the lambda that worked
  int64_t dead_columns = 0;
};

// Runs GPTQ on `w` with Hessian `h` [cols, cols], filling `grid`. Throws moewb::Error on a shape
// mismatch; a Hessian whose damped Cholesky fails at every lambda up to max_damp, or that holds
// non-finite values, gives solved = false.
SolverResult solve(const MatrixRM& w, const Eigen::MatrixXd& h, const SolverOptions& options,
                   ColumnGrid& grid);

// Fills `grid` by rounding every column as it is, without error feedback: RTN on that grid (what a
// matrix without calibration gets).
void roundToNearest(const MatrixRM& w, ColumnGrid& grid);

// Uniform asymmetric codes of `bits` bits in groups of `group` columns, with RTN's min/max step and zero
// per group (fp16-exact): GPTQ with an identity Hessian reproduces quantizeRtn's codes. Dynamic groups
// (chosen from the updated weights) unless `static_groups` (act-order: groups are along the original
// column order, which act-order does not visit in order).
class UniformGrid final : public ColumnGrid {
 public:
  UniformGrid(int bits, int64_t group, bool static_groups);
  void prepare(const MatrixCM& w) override;
  int64_t dynamicGroup() const override { return static_groups_ ? 0 : group_; }
  void startGroup(int64_t first, const Eigen::Ref<const MatrixCM>& w) override;
  void quantizeColumn(int64_t col, const float* w, float* q) override;
  quant::GroupedQuantized take() { return std::move(out_); }

 private:
  int bits_;
  int64_t group_;
  bool static_groups_;
  quant::GroupedQuantized out_;
};

// QMoE's ternary grid: row r's weights become lo_r, 0 or hi_r with lo_r = alpha_r * min(W_r:) and
// hi_r = alpha_r * max(W_r:) (fp16-exact), alpha_r in {0.05, 0.10, ..., 1} chosen per row to minimise
// the rounding error weighted by `column_weights` (diag H when GPTQ runs; empty: unweighted), or
// alpha_r = `fixed_alpha` for every row when it is > 0 (1: QMoE's plain min/max, whose wide levels
// round most weights to 0 and make the codes sparse).
class TernaryGrid final : public ColumnGrid {
 public:
  explicit TernaryGrid(std::vector<double> column_weights = {}, double fixed_alpha = 0);
  void prepare(const MatrixCM& w) override;
  void quantizeColumn(int64_t col, const float* w, float* q) override;
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  const std::vector<int8_t>& codes() const { return codes_; }  // [rows, cols] row-major, -1/0/+1
  const std::vector<float>& lo() const { return lo_; }
  const std::vector<float>& hi() const { return hi_; }

 private:
  std::vector<double> weights_;
  double fixed_alpha_ = 0;
  int64_t rows_ = 0, cols_ = 0;
  std::vector<int8_t> codes_;
  std::vector<float> lo_, hi_;
};

// sqrt(tr(E H E^T) / tr(W H W^T)) with E = W - W^: the relative output error on the calibration inputs.
double outputRelativeError(const MatrixRM& w, const MatrixRM& approx, const Eigen::MatrixXd& h);

}  // namespace moewb::methods::gptq

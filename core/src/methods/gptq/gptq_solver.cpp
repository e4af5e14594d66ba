// SPDX-License-Identifier: MIT
#include "gptq_solver.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "moewb/dtype.h"
#include "moewb/error.h"

namespace moewb::methods::gptq {

namespace {

float toHalfPrecision(float x) {
  return halfToFloat(floatToHalf(x));
}

// The upper factor U of (H + lambda * mean(diag H) * I)^-1 = U^T U, or an empty matrix when a Cholesky
// fails (H not positive definite at this damping) or produces non-finite values.
Eigen::MatrixXd inverseCholeskyUpper(const Eigen::MatrixXd& h, double lambda, double mean_diag) {
  Eigen::MatrixXd damped = h;
  damped.diagonal().array() += lambda * mean_diag;
  const Eigen::LLT<Eigen::MatrixXd> factor(damped);
  if (factor.info() != Eigen::Success) return {};
  Eigen::MatrixXd inverse = factor.solve(Eigen::MatrixXd::Identity(h.rows(), h.cols()));
  inverse = 0.5 * (inverse + inverse.transpose());
  const Eigen::LLT<Eigen::MatrixXd> inverse_factor(inverse);
  if (inverse_factor.info() != Eigen::Success) return {};
  Eigen::MatrixXd u = inverse_factor.matrixU();
  if (!u.allFinite() || u.diagonal().minCoeff() <= 0) return {};
  return u;
}

}  // namespace

SolverResult solve(const MatrixRM& w, const Eigen::MatrixXd& h, const SolverOptions& o, ColumnGrid& grid) {
  const int64_t rows = w.rows(), cols = w.cols();
  if (h.rows() != cols || h.cols() != cols)
    throw Error(fmt::format("gptq: a Hessian of {}x{} for a matrix of {} columns", h.rows(), h.cols(), cols));
  SolverResult result;
  if (!h.allFinite()) {
    result.failure = "the Hessian holds non-finite values";
    return result;
  }
  Eigen::MatrixXd hd = h;
  MatrixCM wc = w;
  // An input that was zero on every calibration token: its column cannot affect the output on those
  // tokens, so GPTQ sets it to zero and gives it a unit curvature (the factorisation needs one).
  for (int64_t j = 0; j < cols; ++j)
    if (hd(j, j) == 0) {
      hd(j, j) = 1;
      wc.col(j).setZero();
      ++result.dead_columns;
    }
  std::vector<int64_t> order(static_cast<std::size_t>(cols));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (o.act_order)
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return hd(a, a) > hd(b, b); });
  grid.prepare(wc);
  if (o.act_order) {
    Eigen::MatrixXd hp(cols, cols);
    MatrixCM wp(rows, cols);
    for (int64_t a = 0; a < cols; ++a) {
      wp.col(a) = wc.col(order[std::size_t(a)]);
      for (int64_t b = 0; b < cols; ++b) hp(a, b) = hd(order[std::size_t(a)], order[std::size_t(b)]);
    }
    hd = std::move(hp);
    wc = std::move(wp);
  }
  const double mean_diag = hd.diagonal().mean();
  Eigen::MatrixXd u;
  double lambda = o.damp;
  for (;;) {
    if (mean_diag > 0) u = inverseCholeskyUpper(hd, lambda, mean_diag);
    if (u.size() > 0) break;
    if (lambda * 10 > o.max_damp * (1 + 1e-9)) {
      result.failure = fmt::format("Cholesky of the damped Hessian failed up to damping {:g}", lambda);
      return result;
    }
    lambda *= 10;
  }
  result.damp = lambda;
  const MatrixCM uf = u.cast<float>();
  hd.resize(0, 0);
  u.resize(0, 0);

  // Groups whose parameters come from the updated weights must see every update from the columns
  // before them: a block ends where such a group would straddle its end (so a group starting inside a
  // block lies wholly inside it, where updates are applied at once).
  const int64_t group = o.act_order ? 0 : grid.dynamicGroup();
  const int64_t block = std::max<int64_t>(1, o.block);
  MatrixCM errors(rows, block);
  Eigen::VectorXf q(rows), e(rows);
  for (int64_t i1 = 0; i1 < cols;) {
    int64_t i2 = std::min(i1 + block, cols);
    if (group > 0)
      for (int64_t g = (i1 / group + 1) * group; g < i2; g += group)
        if (std::min(g + group, cols) > i2) {
          i2 = g;
          break;
        }
    const int64_t n = i2 - i1;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t j = i1 + k;
      if (group > 0 && j % group == 0) grid.startGroup(j, wc.middleCols(j, std::min(group, cols - j)));
      grid.quantizeColumn(order[std::size_t(j)], wc.col(j).data(), q.data());
      e = (wc.col(j) - q) / uf(j, j);
      if (k + 1 < n) wc.middleCols(j + 1, n - k - 1).noalias() -= e * uf.row(j).segment(j + 1, n - k - 1);
      errors.col(k) = e;
    }
    if (i2 < cols) wc.rightCols(cols - i2).noalias() -= errors.leftCols(n) * uf.block(i1, i2, n, cols - i2);
    i1 = i2;
  }
  result.solved = true;
  return result;
}

void roundToNearest(const MatrixRM& w, ColumnGrid& grid) {
  const MatrixCM wc = w;
  grid.prepare(wc);
  const int64_t group = grid.dynamicGroup();
  Eigen::VectorXf q(w.rows());
  for (int64_t j = 0; j < wc.cols(); ++j) {
    if (group > 0 && j % group == 0) grid.startGroup(j, wc.middleCols(j, std::min(group, wc.cols() - j)));
    grid.quantizeColumn(j, wc.col(j).data(), q.data());
  }
}

UniformGrid::UniformGrid(int bits, int64_t group, bool static_groups)
    : bits_(bits), group_(group), static_groups_(static_groups) {
  if (group < 1) throw Error(fmt::format("gptq: group size {} (expected at least 1)", group));
}

void UniformGrid::prepare(const MatrixCM& w) {
  // RTN's own parameter choice, so GPTQ without error feedback is RTN code for code.
  group_ = std::min<int64_t>(group_, w.cols());
  const MatrixRM rm = w;
  out_ = quant::quantizeRtn(rm, {bits_, int(group_)});
}

void UniformGrid::startGroup(int64_t first, const Eigen::Ref<const MatrixCM>& w) {
  const MatrixRM rm = w;
  const quant::GroupedQuantized part = quant::quantizeRtn(rm, {bits_, int(w.cols())});
  const int64_t gpr = out_.groupsPerRow(), g = first / group_;
  for (int64_t r = 0; r < out_.rows; ++r) {
    out_.scales[std::size_t(r * gpr + g)] = part.scales[std::size_t(r)];
    out_.zeros[std::size_t(r * gpr + g)] = part.zeros[std::size_t(r)];
  }
}

void UniformGrid::quantizeColumn(int64_t col, const float* w, float* q) {
  const int64_t gpr = out_.groupsPerRow(), g = col / group_;
  const float max_code = float(out_.maxCode());
  for (int64_t r = 0; r < out_.rows; ++r) {
    const float step = out_.scales[std::size_t(r * gpr + g)], zero = out_.zeros[std::size_t(r * gpr + g)];
    // As quantizeRtn: round half to even of w / step + zero, clamped to the code range.
    const float code = std::clamp(std::nearbyint(w[r] / step + zero), 0.0f, max_code);
    out_.codes[std::size_t(r * out_.cols + col)] = uint8_t(code);
    q[r] = (code - zero) * step;
  }
}

TernaryGrid::TernaryGrid(std::vector<double> column_weights, double fixed_alpha)
    : weights_(std::move(column_weights)), fixed_alpha_(fixed_alpha) {
  if (!(fixed_alpha >= 0 && fixed_alpha <= 1))
    throw Error(fmt::format("qmoe-ternary: alpha {} (expected 0 < alpha <= 1, or 0 to search)", fixed_alpha));
}

namespace {

// The level nearest to x among lo, 0 and hi, as a code -1, 0, +1.
int nearestTernary(float x, float lo, float hi) {
  const float d0 = std::abs(x), dl = std::abs(x - lo), dh = std::abs(x - hi);
  if (d0 <= dl && d0 <= dh) return 0;
  return dl <= dh ? -1 : 1;
}

}  // namespace

void TernaryGrid::prepare(const MatrixCM& w) {
  rows_ = w.rows();
  cols_ = w.cols();
  if (!weights_.empty() && int64_t(weights_.size()) != cols_)
    throw Error(fmt::format("qmoe-ternary: {} column weights for {} columns", weights_.size(), cols_));
  codes_.assign(std::size_t(rows_ * cols_), 0);
  lo_.assign(std::size_t(rows_), 0.0f);
  hi_.assign(std::size_t(rows_), 0.0f);
  constexpr int kSteps = 20;
  for (int64_t r = 0; r < rows_; ++r) {
    const float mn = w.row(r).minCoeff(), mx = w.row(r).maxCoeff();
    if (fixed_alpha_ > 0) {
      lo_[std::size_t(r)] = toHalfPrecision(float(fixed_alpha_) * mn);
      hi_[std::size_t(r)] = toHalfPrecision(float(fixed_alpha_) * mx);
      continue;
    }
    double best = std::numeric_limits<double>::infinity();
    for (int k = kSteps; k >= 1; --k) {
      const float alpha = float(k) / kSteps;
      const float lo = toHalfPrecision(alpha * mn), hi = toHalfPrecision(alpha * mx);
      double err = 0;
      for (int64_t j = 0; j < cols_; ++j) {
        const float x = w(r, j);
        const int c = nearestTernary(x, lo, hi);
        const double d = double(x) - (c < 0 ? lo : (c > 0 ? hi : 0.0f));
        err += (weights_.empty() ? 1.0 : weights_[std::size_t(j)]) * d * d;
      }
      if (err < best) {
        best = err;
        lo_[std::size_t(r)] = lo;
        hi_[std::size_t(r)] = hi;
      }
    }
  }
}

void TernaryGrid::quantizeColumn(int64_t col, const float* w, float* q) {
  for (int64_t r = 0; r < rows_; ++r) {
    const float lo = lo_[std::size_t(r)], hi = hi_[std::size_t(r)];
    const int c = nearestTernary(w[r], lo, hi);
    codes_[std::size_t(r * cols_ + col)] = int8_t(c);
    q[r] = c < 0 ? lo : (c > 0 ? hi : 0.0f);
  }
}

double outputRelativeError(const MatrixRM& w, const MatrixRM& approx, const Eigen::MatrixXd& h) {
  const Eigen::MatrixXf hf = h.cast<float>();
  const MatrixRM e = w - approx;
  const double num = double((e * hf).cwiseProduct(e).sum());
  const double den = double((w * hf).cwiseProduct(w).sum());
  return den > 0 ? std::sqrt(std::max(0.0, num) / den) : 0.0;
}

}  // namespace moewb::methods::gptq

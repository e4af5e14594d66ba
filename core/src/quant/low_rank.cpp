// SPDX-License-Identifier: MIT
#include "moewb/quant/low_rank.h"

#include <fmt/format.h>

#include <Eigen/Eigenvalues>
#include <Eigen/QR>
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "moewb/error.h"
#include "moewb/parallel.h"

namespace moewb::quant {

namespace {

using MatrixF = Eigen::MatrixXf;  // column-major scratch

// Dense eigensolver is fast below this side; above it Lanczos on the Gram matrix is much cheaper
// (Eigen's tridiagonalisation of a 4096-square matrix takes about a minute on one core).
constexpr Eigen::Index kDenseEigenLimit = 1024;

struct TopEigen {
  Eigen::VectorXd values;   // descending
  Eigen::MatrixXd vectors;  // columns
};

TopEigen denseTopEigen(const Eigen::MatrixXd& g, int r) {
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(g);
  const Eigen::Index d = g.rows();
  TopEigen out{Eigen::VectorXd(r), Eigen::MatrixXd(d, r)};
  for (int i = 0; i < r; ++i) {  // ascending order from Eigen
    out.values[i] = es.eigenvalues()[d - 1 - i];
    out.vectors.col(i) = es.eigenvectors().col(d - 1 - i);
  }
  return out;
}

Eigen::VectorXd randomUnit(Eigen::Index d, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  Eigen::VectorXd v(d);
  for (Eigen::Index i = 0; i < d; ++i) v[i] = normal(rng);
  return v / v.norm();
}

// Lanczos with full reorthogonalisation (twice, "twice is enough") on a symmetric PSD matrix. Ritz pairs
// from the tridiagonal matrix; converged when |beta_k * s_k,i| <= tol * theta_max for the r wanted ones.
TopEigen lanczosTopEigen(const Eigen::MatrixXd& g, int r, uint64_t seed) {
  const Eigen::Index d = g.rows();
  const Eigen::Index max_k = d;
  const double tol = 1e-10;
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  Eigen::MatrixXd q(d, std::min<Eigen::Index>(max_k, 2 * r + 64));
  std::vector<double> alpha, beta;  // beta[j] couples q_j and q_{j+1}
  q.col(0) = randomUnit(d, rng);
  Eigen::Index k = 0, last_check = 0;
  Eigen::VectorXd w;
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> tri;
  auto reorthogonalise = [&](Eigen::VectorXd& v, Eigen::Index cols) {
    for (int pass = 0; pass < 2; ++pass) v -= q.leftCols(cols) * (q.leftCols(cols).transpose() * v);
  };
  while (true) {
    w.noalias() = g * q.col(k);
    alpha.push_back(q.col(k).dot(w));
    reorthogonalise(w, k + 1);
    const double b = w.norm();
    ++k;
    const bool exhausted = k >= max_k;
    // Checking needs the tridiagonal eigenvectors (O(k^3)): check at geometrically spaced sizes.
    bool check = exhausted || (k >= r + 8 && k - last_check >= std::max<Eigen::Index>(16, k / 8));
    if (check) last_check = k;
    // An invariant subspace: the tridiagonal matrix splits; continue from a fresh orthogonal direction.
    const double scale = std::max(std::abs(alpha.front()), 1e-300);
    const bool breakdown = b <= 1e-13 * scale;
    if (check || breakdown) {
      Eigen::VectorXd diag = Eigen::Map<Eigen::VectorXd>(alpha.data(), k);
      Eigen::VectorXd sub =
          k > 1 ? Eigen::VectorXd(Eigen::Map<Eigen::VectorXd>(beta.data(), k - 1)) : Eigen::VectorXd(0);
      tri.computeFromTridiagonal(diag, sub, Eigen::ComputeEigenvectors);
      if (k >= r) {
        const double theta_max = std::max(std::abs(tri.eigenvalues()[k - 1]), 1e-300);
        bool converged = true;
        for (int i = 0; i < r && converged; ++i)
          converged = std::abs(b * tri.eigenvectors()(k - 1, k - 1 - i)) <= tol * theta_max;
        if (converged || exhausted) {
          TopEigen out{Eigen::VectorXd(r), Eigen::MatrixXd(d, r)};
          for (int i = 0; i < r; ++i) {
            out.values[i] = tri.eigenvalues()[k - 1 - i];
            out.vectors.col(i) = q.leftCols(k) * tri.eigenvectors().col(k - 1 - i);
          }
          return out;
        }
      }
    }
    if (k == q.cols()) q.conservativeResize(d, std::min<Eigen::Index>(max_k, q.cols() * 2));
    if (breakdown) {
      Eigen::VectorXd v = randomUnit(d, rng);
      reorthogonalise(v, k);
      q.col(k) = v / v.norm();
      beta.push_back(0.0);
    } else {
      q.col(k) = w / b;
      beta.push_back(b);
    }
  }
}

TopEigen topEigen(const Eigen::MatrixXd& g, int r, uint64_t seed) {
  // Lanczos needs a Krylov space a few times r: for a large share of a small matrix, dense is cheaper.
  const bool dense = g.rows() <= 64 || (g.rows() <= kDenseEigenLimit && 4 * r > g.rows());
  return dense ? denseTopEigen(g, r) : lanczosTopEigen(g, r, seed);
}

MatrixF orthonormalColumns(const MatrixF& y) {
  Eigen::HouseholderQR<MatrixF> qr(y);
  return qr.householderQ() * MatrixF::Identity(y.rows(), y.cols());
}

// Splits the singular values onto both factors. `left` holds left singular vectors as columns
// (rows x r); V is computed as diag(1/sqrt(sigma)) * left^T * E.
LowRankFactors fromLeftVectors(const MatrixRM& e, const MatrixF& left, const Eigen::VectorXd& sigma) {
  const int r = int(sigma.size());
  LowRankFactors f;
  f.sigma = sigma;
  f.u.resize(e.rows(), r);
  f.v.noalias() = left.transpose() * e;
  for (int i = 0; i < r; ++i) {
    const double s = sigma[i];
    const float root = float(std::sqrt(s));
    f.u.col(i) = left.col(i) * root;
    f.v.row(i) *= s > 0 ? float(1.0 / std::sqrt(s)) : 0.0f;
  }
  return f;
}

LowRankFactors fromRightVectors(const MatrixRM& e, const MatrixF& right, const Eigen::VectorXd& sigma) {
  const int r = int(sigma.size());
  LowRankFactors f;
  f.sigma = sigma;
  f.u.noalias() = e * right;
  f.v.resize(r, e.cols());
  for (int i = 0; i < r; ++i) {
    const double s = sigma[i];
    f.u.col(i) *= s > 0 ? float(1.0 / std::sqrt(s)) : 0.0f;
    f.v.row(i) = right.col(i).transpose() * float(std::sqrt(s));
  }
  return f;
}

LowRankFactors exactTruncatedSvd(const MatrixRM& e, int r, const LowRankOptions& o) {
  const Eigen::MatrixXd g = smallerGram(e, o.threads);
  const TopEigen top = topEigen(g, r, o.seed);
  const Eigen::VectorXd sigma = top.values.cwiseMax(0.0).cwiseSqrt();
  const MatrixF vecs = top.vectors.cast<float>();
  return e.rows() <= e.cols() ? fromLeftVectors(e, vecs, sigma) : fromRightVectors(e, vecs, sigma);
}

LowRankFactors randomizedTruncatedSvd(const MatrixRM& e, int r, const LowRankOptions& o) {
  const Eigen::Index m = e.rows(), n = e.cols();
  const Eigen::Index k = std::min<Eigen::Index>(std::min(m, n), r + std::max(0, o.oversample));
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal;
  MatrixF omega(n, k);
  for (Eigen::Index j = 0; j < k; ++j)
    for (Eigen::Index i = 0; i < n; ++i) omega(i, j) = normal(rng);
  MatrixF y = e * omega;
  for (int it = 0; it < o.power_iters; ++it) {
    const MatrixF qy = orthonormalColumns(y);
    const MatrixF z = orthonormalColumns(MatrixF(e.transpose() * qy));
    y.noalias() = e * z;
  }
  const MatrixF qy = orthonormalColumns(y);  // m x k basis of the range
  const MatrixF b = qy.transpose() * e;      // k x n
  const Eigen::MatrixXd bbt = (b * b.transpose()).cast<double>();
  const TopEigen top = denseTopEigen(bbt, r);
  const Eigen::VectorXd sigma = top.values.cwiseMax(0.0).cwiseSqrt();
  const MatrixF left = qy * top.vectors.cast<float>();
  return fromLeftVectors(e, left, sigma);
}

}  // namespace

namespace {

// smallerGram's body; `chunk_done(done, total)` (from any worker, possibly concurrently) after each chunk
// may throw to stop (moewb::Cancelled).
Eigen::MatrixXd gramInChunks(const MatrixRM& e, int threads,
                             const std::function<void(Eigen::Index, Eigen::Index)>& chunk_done) {
  const bool rows_side = e.rows() <= e.cols();
  const Eigen::Index d = rows_side ? e.rows() : e.cols();
  const Eigen::Index len = rows_side ? e.cols() : e.rows();
  // Products of float chunks (fast GEMM) summed in double: each chunk sums only `chunk` terms in float.
  const Eigen::Index chunk = 512;
  const Eigen::Index chunks = (len + chunk - 1) / chunk;
  // A fixed number of partial sums, independent of the thread count, keeps results reproducible.
  const int slots = d >= 512 && chunks >= 2 ? 2 : 1;
  std::vector<Eigen::MatrixXd> partial(std::size_t(slots), Eigen::MatrixXd::Zero(d, d));
  auto work = [&](std::size_t slot) {
    MatrixF gc(d, d);
    for (Eigen::Index c = Eigen::Index(slot); c < chunks; c += slots) {
      const Eigen::Index c0 = c * chunk, n = std::min(chunk, len - c0);
      gc.setZero();
      if (rows_side)
        gc.selfadjointView<Eigen::Lower>().rankUpdate(MatrixF(e.middleCols(c0, n)));
      else
        gc.selfadjointView<Eigen::Lower>().rankUpdate(MatrixF(e.middleRows(c0, n).transpose()));
      partial[slot].triangularView<Eigen::Lower>() += gc.cast<double>();
      if (chunk_done) chunk_done(c + 1, chunks);
    }
  };
  if (slots > 1 && threads > 1)
    parallelFor(std::size_t(slots), work, std::min(threads, slots));
  else
    for (int s = 0; s < slots; ++s) work(std::size_t(s));
  Eigen::MatrixXd g = partial[0];
  for (int s = 1; s < slots; ++s) g.triangularView<Eigen::Lower>() += partial[std::size_t(s)];
  g.triangularView<Eigen::StrictlyUpper>() = g.transpose();
  return g;
}

// Eigen's tridiagonalization_inplace (Householder reduction of the lower triangle of `a`, the O(n^3)
// part of a dense symmetric eigensolver: about a minute for a 4096-square matrix on one core), the same
// operations one column at a time so that `column_done(i, n)` can stop a long spectrum between columns
// by throwing. On return the diagonal and first subdiagonal of `a` hold the tridiagonal matrix.
void tridiagonalizeInPlace(Eigen::MatrixXd& a,
                           const std::function<void(Eigen::Index, Eigen::Index)>& column_done) {
  const Eigen::Index n = a.rows();
  Eigen::VectorXd h_coeffs(std::max<Eigen::Index>(n - 1, 0));
  for (Eigen::Index i = 0; i + 1 < n; ++i) {
    const Eigen::Index remaining = n - i - 1;
    double beta = 0, h = 0;
    a.col(i).tail(remaining).makeHouseholderInPlace(h, beta);
    a.col(i).coeffRef(i + 1) = 1;
    h_coeffs.tail(remaining).noalias() =
        a.bottomRightCorner(remaining, remaining).selfadjointView<Eigen::Lower>() *
        (h * a.col(i).tail(remaining));
    h_coeffs.tail(remaining) +=
        (h * -0.5 * h_coeffs.tail(remaining).dot(a.col(i).tail(remaining))) * a.col(i).tail(remaining);
    a.bottomRightCorner(remaining, remaining)
        .selfadjointView<Eigen::Lower>()
        .rankUpdate(a.col(i).tail(remaining), h_coeffs.tail(remaining), -1.0);
    a.col(i).coeffRef(i + 1) = beta;
    h_coeffs.coeffRef(i) = h;
    if (column_done) column_done(i + 1, n - 1);
  }
}

}  // namespace

Eigen::MatrixXd smallerGram(const MatrixRM& e, int threads) {
  return gramInChunks(e, threads, {});
}

LowRankFactors truncatedSvd(const MatrixRM& e, int rank, const LowRankOptions& o) {
  const int max_rank = int(std::min(e.rows(), e.cols()));
  if (rank < 0 || rank > max_rank)
    throw Error(
        fmt::format("rank {} is outside 0..{} for a {}x{} matrix", rank, max_rank, e.rows(), e.cols()));
  if (rank == 0) {
    LowRankFactors f;
    f.u.resize(e.rows(), 0);
    f.v.resize(0, e.cols());
    return f;
  }
  return o.method == SvdMethod::Exact ? exactTruncatedSvd(e, rank, o) : randomizedTruncatedSvd(e, rank, o);
}

Eigen::VectorXd singularValues(const MatrixRM& e, int threads, const ProgressFn& progress) {
  // Shares of the time (a 4096-square matrix: the Gram matrix a few seconds, the reduction a minute).
  constexpr double kGram = 0.08, kReduce = 0.9;
  ProgressReporter reporter(progress);
  auto report = [&reporter](double fraction, std::string_view stage) {
    if (!reporter.report(fraction, stage)) throw Cancelled{};
  };
  Eigen::MatrixXd g = gramInChunks(e, threads, [&](Eigen::Index done, Eigen::Index total) {
    report(kGram * double(done) / double(total), "Gram matrix");
  });
  const Eigen::Index n = g.rows();
  if (n == 0) return Eigen::VectorXd(0);
  // As Eigen's SelfAdjointEigenSolver: scaled into [-1, 1] against over- and underflow, scaled back after.
  double scale = g.cwiseAbs().maxCoeff();  // g is stored whole (symmetric)
  if (scale == 0) scale = 1;
  g.triangularView<Eigen::Lower>() /= scale;
  tridiagonalizeInPlace(g, [&](Eigen::Index done, Eigen::Index total) {
    // Column i costs ~(n - i)^2: the share done is 1 - (1 - i/n)^3.
    const double left = 1.0 - double(done) / double(total);
    report(kGram + kReduce * (1.0 - left * left * left), "eigenvalues (tridiagonal reduction)");
  });
  const Eigen::VectorXd diag = g.diagonal();
  const Eigen::VectorXd sub = n > 1 ? Eigen::VectorXd(g.diagonal(-1)) : Eigen::VectorXd(0);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es;
  es.computeFromTridiagonal(diag, sub, Eigen::EigenvaluesOnly);
  report(1.0, "eigenvalues");
  Eigen::VectorXd s = (es.eigenvalues() * scale).reverse().cwiseMax(0.0).cwiseSqrt();
  return s;
}

}  // namespace moewb::quant

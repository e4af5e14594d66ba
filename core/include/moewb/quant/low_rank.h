// SPDX-License-Identifier: MIT
#pragma once
#include <Eigen/Core>
#include <cstdint>

#include "moewb/catalog.h"
#include "moewb/progress.h"

namespace moewb::quant {

enum class SvdMethod : uint8_t {
  // Top-r singular triplets to double precision: eigenpairs of the smaller Gram matrix (accumulated in
  // double) by a dense symmetric eigensolver when its side is <= 1024, otherwise by Lanczos with full
  // reorthogonalisation run until every wanted Ritz pair has a relative residual below 1e-10.
  Exact,
  // Halko-Martinsson-Tropp randomized range finder with oversampling and power iterations (seeded).
  Randomized,
};

struct LowRankOptions {
  SvdMethod method = SvdMethod::Exact;
  int oversample = 10;  // randomized: extra columns of the sketch
  int power_iters = 2;  // randomized: subspace iterations
  uint64_t seed = 0;    // randomized sketch and Lanczos start vector
  int threads = 1;      // threads for the Gram matrix / products of one matrix
};

// E ~= U * V with U = U_r sqrt(S_r) [rows, r] and V = sqrt(S_r) V_r^T [r, cols] (MiLo's split of the
// singular values onto both factors, so they have equal scale for low-bit storage).
struct LowRankFactors {
  MatrixRM u, v;
  Eigen::VectorXd sigma;  // the r singular values, descending
  int rank() const { return int(sigma.size()); }
};

LowRankFactors truncatedSvd(const MatrixRM& e, int rank, const LowRankOptions& o = {});

// All singular values of `e`, descending, from the eigenvalues of the smaller Gram matrix in double:
// absolute accuracy about 1e-15 * sigma_max, enough for spectra and rank-at-tau counts. Reports progress
// while it works (a 4096-square matrix takes about a minute on one core); throws moewb::Cancelled when
// `progress` returns false.
Eigen::VectorXd singularValues(const MatrixRM& e, int threads = 1, const ProgressFn& progress = {});

// The smaller Gram matrix (E E^T when rows <= cols, else E^T E), accumulated in double.
Eigen::MatrixXd smallerGram(const MatrixRM& e, int threads = 1);

}  // namespace moewb::quant

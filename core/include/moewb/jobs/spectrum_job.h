// SPDX-License-Identifier: MIT
#pragma once
// One matrix's quantization residual in depth as one request object: `moewb spectrum` and the GUI's
// tensor inspector build a SpectrumRequest and run it through runSpectrumJob with the same
// progress/cancel contract.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/progress.h"
#include "moewb/quant/analysis.h"

namespace moewb::jobs {

struct SpectrumRequest {
  std::shared_ptr<const ModelCatalog> catalog;
  std::string tensor;          // a catalog matrix name (expert slices: NAME[e]); or:
  std::ptrdiff_t matrix = -1;  // a catalog matrix index (used when >= 0)
  // The base quantizer of the residual: a registered method with grouped codes and no compensators.
  std::string method = "hqq";
  int bits = 3, group = 64;
  // Ranks of the error-versus-rank curve; empty: 0..8, then doubling, then the full rank.
  std::vector<int> ranks;
  double tau = 0.5;  // the residual rank is counted at sigma_i >= tau * sigma_max
  // MiLo on the matrix alone at this rank (0: none): its convergence curve, with MiLo's stop rule or, when
  // `milo_full_curve`, every iteration.
  int milo_rank = 0;
  bool milo_full_curve = false;
  int threads = 0;  // 0: workerThreads()
};

struct SpectrumJobResult {
  std::size_t matrix = 0;  // catalog index
  std::string tensor;
  int64_t rows = 0, cols = 0;
  quant::ResidualSpectrum spectrum;
  double quant_rel_error = 0;  // ||W - dequant(Q)|| / ||W||
  int rank_at_tau = 0;
  std::vector<int> ranks;
  std::vector<double> error_at_rank;
  // The value histogram with the grid of the widest group (where outliers stretch the grid most).
  quant::GroupGridHistogram grid;
  int64_t grid_row = 0, grid_group = 0;
  int milo_rank = 0;
  std::vector<double> milo_curve;
  double milo_error = 0;  // of what MiLo stores (its compensator format)
};

// Reads the matrix, quantizes it, takes the singular values of the residual (the long part) and, when
// asked, runs MiLo. Errors name the tensor or option at fault; returning false from `progress` throws
// moewb::Cancelled.
SpectrumJobResult runSpectrumJob(const SpectrumRequest& request, const ProgressFn& progress = {});

}  // namespace moewb::jobs

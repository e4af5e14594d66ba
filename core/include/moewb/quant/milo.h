// SPDX-License-Identifier: MIT
#pragma once
#include <functional>
#include <vector>

#include "moewb/quant/compensator.h"
#include "moewb/quant/grouped_quant.h"
#include "moewb/quant/low_rank.h"

namespace moewb::quant {

// MiLo (Algorithm 1): U, V = 0; repeat { Q = HQQ(W - UV); E = W - dequant(Q); U, V = rank-r truncated
// SVD of E with sqrt(Sigma) on both factors }; eps_t = ||E - UV|| / ||W||. Stops when the relative drop of
// the `window`-iteration moving average of eps falls below `tol` (a rise counts: divergence), or after
// `max_iters`; the best iterate is kept. The compensators are then stored in `compensator` format and
// the error reported is that of what is stored.
struct MiloOptions {
  int rank = 16;
  int max_iters = 20;
  double tol = 1e-4;
  int window = 3;
  LowRankOptions svd;
  // The library's global stop rule inside the loop: it is what MiLo's published loop uses and it
  // converges slightly lower than choosing per group (measured on tiny-mixtral).
  HqqOptions hqq{.stop = HqqStopRule::GlobalMeanAbsoluteError};
  CompensatorFormat compensator = CompensatorFormat::Int3;
  int compensator_group = 64;
};

struct MiloResult {
  GroupedQuantized base;
  QuantizedFactor u, v;                       // as stored
  std::vector<double> curve;                  // eps_t per iteration (float compensators)
  int best_iteration = 0;                     // index into curve
  double error_unquantized_compensators = 0;  // eps at the best iterate
  double error = 0;                           // ||W - dequant(base) - U^ V^|| / ||W|| with the stored factors
};

// `threads` parallelises the work inside this one matrix; `on_iteration(t, eps_t)` returning false
// cancels (throws moewb::Cancelled). quantizeMilo = storeMiloIterate(miloIterate(...)).
MiloResult quantizeMilo(const MatrixRM& w, const GroupedQuantSettings& s, const MiloOptions& o,
                        int threads = 1, const std::function<bool(int, double)>& on_iteration = {});

// The two halves of quantizeMilo, so that a GPU backend's loop (which yields the same fp32 factors)
// is stored exactly as the CPU's: the loop's best iterate with unquantized factors...
struct MiloIterate {
  GroupedQuantized base;
  MatrixRM u, v;              // [rows, rank] and [rank, cols], singular values split evenly
  std::vector<double> curve;  // eps_t per iteration (fp32 factors)
  int best_iteration = 0;     // index into curve
  double error = 0;           // eps at the best iterate
};
MiloIterate miloIterate(const MatrixRM& w, const GroupedQuantSettings& s, const MiloOptions& o,
                        int threads = 1, const std::function<bool(int, double)>& on_iteration = {});
// ...and its storage: U and V in `o.compensator` format, error of what is stored.
MiloResult storeMiloIterate(const MatrixRM& w, MiloIterate&& it, const MiloOptions& o);

// dequant(base) + U^ V^ for a result's stored parts.
MatrixRM reconstruct(const GroupedQuantized& base, const QuantizedFactor* u, const QuantizedFactor* v);

}  // namespace moewb::quant

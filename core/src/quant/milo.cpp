// SPDX-License-Identifier: MIT
#include "moewb/quant/milo.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "moewb/error.h"
#include "moewb/progress.h"

namespace moewb::quant {

namespace {

// The moving-average stop rule: true once the average of the last `window` errors fell by less than
// `tol` (relatively) compared with the average one iteration earlier, or rose.
bool converged(const std::vector<double>& curve, int window, double tol) {
  const int n = int(curve.size());
  if (window < 1 || n < window + 1) return false;
  double now = 0, before = 0;
  for (int i = 0; i < window; ++i) {
    now += curve[std::size_t(n - 1 - i)];
    before += curve[std::size_t(n - 2 - i)];
  }
  return before <= 0 || (before - now) / before < tol;
}

}  // namespace

MatrixRM reconstruct(const GroupedQuantized& base, const QuantizedFactor* u, const QuantizedFactor* v) {
  MatrixRM out = dequantize(base);
  if (u && v && u->cols > 0) out.noalias() += dequantizeFactor(*u) * dequantizeFactor(*v);
  return out;
}

MiloIterate miloIterate(const MatrixRM& w, const GroupedQuantSettings& s, const MiloOptions& o, int threads,
                        const std::function<bool(int, double)>& on_iteration) {
  validateSettings(s);
  const int max_rank = int(std::min(w.rows(), w.cols()));
  if (o.rank < 0 || o.rank > max_rank)
    throw Error(fmt::format("MiLo rank {} is outside 0..{} for a {}x{} matrix", o.rank, max_rank, w.rows(),
                            w.cols()));
  const double norm = frobeniusNorm(w);
  const double inv_norm = norm > 0 ? 1.0 / norm : 1.0;
  MiloIterate best;
  double best_eps = std::numeric_limits<double>::infinity();
  LowRankFactors best_factors;
  MatrixRM target = w, residual(w.rows(), w.cols());
  LowRankOptions svd = o.svd;
  svd.threads = threads;
  const int iters = o.rank == 0 ? 1 : std::max(1, o.max_iters);
  for (int t = 0; t < iters; ++t) {
    GroupedQuantized q = quantizeHqq(target, s, o.hqq, threads);
    residual = w;
    dequantizeInto(q, residual, -1.0f);  // E = W - dequant(Q)
    svd.seed = o.svd.seed + uint64_t(t);
    LowRankFactors f = truncatedSvd(residual, o.rank, svd);
    MatrixRM uv;
    if (o.rank > 0) {
      uv.noalias() = f.u * f.v;
      residual -= uv;
    }
    const double eps = frobeniusNorm(residual) * inv_norm;
    best.curve.push_back(eps);
    if (!std::isfinite(eps)) break;
    if (eps < best_eps) {
      best_eps = eps;
      best.base = std::move(q);
      best.best_iteration = t;
      best_factors = std::move(f);
    }
    if (on_iteration && !on_iteration(t, eps)) throw Cancelled{};
    if (converged(best.curve, o.window, o.tol)) break;
    if (o.rank > 0) target = w - uv;
  }
  if (!std::isfinite(best_eps))
    throw Error(fmt::format("MiLo: the error of a {}x{} matrix is not finite (NaN/Inf weights?)", w.rows(),
                            w.cols()));
  best.error = best_eps;
  best.u = std::move(best_factors.u);
  best.v = std::move(best_factors.v);
  return best;
}

MiloResult storeMiloIterate(const MatrixRM& w, MiloIterate&& it, const MiloOptions& o) {
  MiloResult r;
  r.base = std::move(it.base);
  r.curve = std::move(it.curve);
  r.best_iteration = it.best_iteration;
  r.error_unquantized_compensators = it.error;
  r.u = quantizeFactor(it.u, o.compensator, o.compensator_group);
  r.v = quantizeFactor(it.v, o.compensator, o.compensator_group);
  r.error = relativeError(w, reconstruct(r.base, &r.u, &r.v));
  return r;
}

MiloResult quantizeMilo(const MatrixRM& w, const GroupedQuantSettings& s, const MiloOptions& o, int threads,
                        const std::function<bool(int, double)>& on_iteration) {
  return storeMiloIterate(w, miloIterate(w, s, o, threads, on_iteration), o);
}

}  // namespace moewb::quant

// SPDX-License-Identifier: MIT
#include "moewb/jobs/spectrum_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "moewb/error.h"
#include "moewb/methods/registry.h"
#include "moewb/parallel.h"
#include "moewb/quant/model_quantizer.h"

namespace moewb::jobs {

SpectrumJobResult runSpectrumJob(const SpectrumRequest& r, const ProgressFn& progress) {
  if (!r.catalog) throw Error("spectrum: no model");
  // NaN passes range checks (every comparison with it is false): said here, for every caller.
  if (!(r.tau >= 0.0 && r.tau <= 1.0)) throw Error(fmt::format("spectrum: --tau {} is not a number in 0..1", r.tau));
  if (r.milo_rank < 0) throw Error(fmt::format("spectrum: --milo-rank {} is negative (0: no MiLo curve)", r.milo_rank));
  for (int rank : r.ranks)
    if (rank < 0) throw Error(fmt::format("spectrum: --ranks holds {}, expected ranks >= 0", rank));
  const ModelCatalog& catalog = *r.catalog;
  // Shares of the job's fraction: the singular values are the long part, the MiLo preview the next one.
  const double spectrum_start = 0.1, milo_start = r.milo_rank > 0 ? 0.8 : 1.0;
  auto step = [&progress](double fraction, std::string_view stage) {
    if (progress && !progress(fraction, stage)) throw Cancelled{};
  };
  SpectrumJobResult out;
  if (r.matrix >= 0) {
    if (std::size_t(r.matrix) >= catalog.matrices().size())
      throw Error(
          fmt::format("spectrum: matrix {} of {} does not exist", r.matrix, catalog.matrices().size()));
    out.matrix = std::size_t(r.matrix);
  } else {
    const auto& ms = catalog.matrices();
    const auto it =
        std::find_if(ms.begin(), ms.end(), [&](const WeightMatrix& m) { return m.name == r.tensor; });
    if (it == ms.end())
      throw Error(fmt::format("spectrum: {} has no weight matrix named '{}' (see `moewb inspect`)",
                              catalog.checkpoint().root(), r.tensor));
    out.matrix = std::size_t(it - ms.begin());
  }
  const WeightMatrix& found = catalog.matrices()[out.matrix];
  out.tensor = found.name;
  // The eigen-solver divides by the matrix's size: an empty matrix crashed it (SIGFPE).
  if (found.rows <= 0 || found.cols <= 0)
    throw Error(fmt::format("spectrum: '{}' is a {}x{} matrix with no values: there is no spectrum to compute",
                            found.name, found.rows, found.cols));
  // The residual of a base quantizer with grouped codes (a method with compensators would hide it).
  const methods::WeightMethod& method = methods::weightMethod(r.method, "spectrum: --method");
  if (method.usesRankPolicy() || !method.option("bits") || !method.option("group"))
    throw Error(
        fmt::format("spectrum: --method {} is not a base quantizer with --bits and --group", r.method));
  quant::QuantizeSettings settings = method.defaults();
  methods::setOption(*method.option("bits"), settings, std::to_string(r.bits), "spectrum: --bits");
  methods::setOption(*method.option("group"), settings, std::to_string(r.group), "spectrum: --group");
  method.validate(settings);
  const int threads = r.threads > 0 ? r.threads : workerThreads();

  step(0.0, "reading the matrix");
  const MatrixRM w = catalog.readMatrix(found);
  out.rows = w.rows();
  out.cols = w.cols();
  std::string upper(method.name());  // "HQQ", as the inspector's job list shows the stage
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return char(std::toupper(c)); });
  step(0.05, upper);
  const quant::GroupedQuantized q = method.quantize(w, settings, 0, 0, threads, {}, nullptr).base;
  // The widest group: its grid is the coarsest, the one to compare the distribution with.
  const auto widest = std::max_element(q.scales.begin(), q.scales.end());
  const std::size_t g = widest == q.scales.end() ? 0 : std::size_t(widest - q.scales.begin());
  out.grid_row = int64_t(g / std::size_t(q.groupsPerRow()));
  out.grid_group = int64_t(g % std::size_t(q.groupsPerRow()));
  out.grid = quant::groupGridHistogram(w, q, out.grid_row, out.grid_group);

  step(spectrum_start, "singular values");
  out.spectrum = quant::residualSpectrum(w, q, threads, [&](double f, std::string_view stage) {
    return !progress || progress(spectrum_start + (milo_start - spectrum_start) * f, stage);
  });
  out.quant_rel_error =
      out.spectrum.weight_norm > 0 ? out.spectrum.residual_norm / out.spectrum.weight_norm : 0;
  out.rank_at_tau = quant::rankAtTau(out.spectrum.sigma, r.tau);
  out.ranks = r.ranks;
  if (out.ranks.empty()) {
    const int max_rank = int(out.spectrum.sigma.size());
    for (int k = 0; k < max_rank; k = k < 8 ? k + 1 : k * 2) out.ranks.push_back(k);  // dense at small ranks
    out.ranks.push_back(max_rank);
  }
  out.error_at_rank = quant::errorVsRank(out.spectrum, out.ranks);

  if (r.milo_rank > 0) {
    const std::string stage = r.milo_full_curve ? fmt::format("MiLo rank {}", r.milo_rank) : "MiLo preview";
    step(milo_start, stage);
    quant::QuantizeSettings milo;
    milo.method = "milo";
    milo.grouped = settings.grouped;
    const int iterations = milo.milo.max_iters > 0 ? milo.milo.max_iters : 20;
    if (r.milo_full_curve) milo.milo.tol = -1;  // every iteration, not MiLo's stop rule
    const quant::QuantizedMatrix m =
        quant::quantizeMatrix(w, milo, r.milo_rank, 0, threads, [&](int t, double) {
          const double share = std::min(1.0, double(t + 1) / double(iterations));
          return !progress || progress(milo_start + (1 - milo_start) * share, stage);
        });
    out.milo_rank = m.rank;
    out.milo_curve = m.curve;
    out.milo_error = m.rel_error;
  }
  return out;
}

}  // namespace moewb::jobs

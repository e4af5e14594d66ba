// SPDX-License-Identifier: MIT
#include "tensor_analysis.h"

#include <algorithm>

#include "moewb/parallel.h"
#include "moewb/quant/analysis.h"
#include "moewb/quant/grouped_quant.h"
#include "moewb/quant/model_quantizer.h"

namespace moewb::gui {

TensorAnalysis analyseMatrix(const ModelCatalog& catalog, std::size_t matrix, int bits, int group,
                             int miloRank, const ProgressFn& progress) {
  // Shares of the job's bar: the singular values are the long part, the MiLo preview the next one.
  constexpr double kSpectrumStart = 0.1, kMiloStart = 0.8;
  auto step = [&progress](double fraction, std::string_view stage) {
    if (progress && !progress(fraction, stage)) throw Cancelled{};
  };
  step(0.0, "reading the matrix");
  TensorAnalysis a;
  a.matrix = matrix;
  a.bits = bits;
  a.group = group;
  const MatrixRM w = catalog.readMatrix(catalog.matrices().at(matrix));
  quant::GroupedQuantSettings settings;
  settings.bits = bits;
  settings.group = group;
  const int threads = workerThreads();
  step(0.05, "HQQ");
  const quant::GroupedQuantized q = quant::quantizeHqq(w, settings, {}, threads);
  // The widest group: its grid is the coarsest, the one to compare the distribution with.
  const auto widest = std::max_element(q.scales.begin(), q.scales.end());
  const std::size_t g = widest == q.scales.end() ? 0 : std::size_t(widest - q.scales.begin());
  a.gridRow = long(g / std::size_t(q.groupsPerRow()));
  a.gridGroup = long(g % std::size_t(q.groupsPerRow()));
  const quant::GroupGridHistogram h = quant::groupGridHistogram(w, q, a.gridRow, a.gridGroup);
  a.histLo = h.lo;
  a.histHi = h.hi;
  a.histogram = h.counts;
  a.gridLevels = h.grid;
  const quant::ResidualSpectrum spectrum =
      quant::residualSpectrum(w, q, threads, [&progress](double f, std::string_view stage) {
        return !progress || progress(kSpectrumStart + (kMiloStart - kSpectrumStart) * f, stage);
      });
  a.singularValues = spectrum.sigma;
  const int maxRank = int(spectrum.sigma.size());
  for (int r = 0; r < maxRank; r = r < 8 ? r + 1 : r * 2) a.ranks.push_back(r);  // dense at small ranks
  a.ranks.push_back(maxRank);
  a.errorAtRank = quant::errorVsRank(spectrum, a.ranks);
  if (miloRank > 0) {
    quant::QuantizeSettings milo;
    milo.method = "milo";
    milo.grouped = settings;
    step(kMiloStart, "MiLo preview");
    // MiLo stops by its own rule (20 iterations at most by default): the bar fills towards that.
    const quant::QuantizedMatrix m =
        quant::quantizeMatrix(w, milo, miloRank, 0, threads, [&progress](int t, double) {
          const double share = std::min(1.0, (t + 1) / 20.0);
          return !progress || progress(kMiloStart + (1 - kMiloStart) * share, "MiLo preview");
        });
    a.miloRank = m.rank;
    a.miloCurve = m.curve;
    a.miloError = m.rel_error;
  }
  return a;
}

}  // namespace moewb::gui

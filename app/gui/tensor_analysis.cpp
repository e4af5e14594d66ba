// SPDX-License-Identifier: MIT
#include "tensor_analysis.h"

#include <memory>

#include "moewb/jobs/spectrum_job.h"

namespace moewb::gui {

TensorAnalysis analyseMatrix(const ModelCatalog& catalog, std::size_t matrix, int bits, int group,
                             int miloRank, const ProgressFn& progress) {
  // `moewb spectrum --method hqq` on one matrix: the same request and function (MiLo with its stop rule).
  jobs::SpectrumRequest request;
  // The catalog outlives the job (the session holds it); the request only borrows it.
  request.catalog = std::shared_ptr<const ModelCatalog>(std::shared_ptr<const ModelCatalog>{}, &catalog);
  request.matrix = std::ptrdiff_t(matrix);
  request.method = "hqq";
  request.bits = bits;
  request.group = group;
  request.milo_rank = miloRank;
  jobs::SpectrumJobResult r = jobs::runSpectrumJob(request, progress);
  TensorAnalysis a;
  a.matrix = r.matrix;
  a.bits = bits;
  a.group = group;
  a.histLo = r.grid.lo;
  a.histHi = r.grid.hi;
  a.histogram = std::move(r.grid.counts);
  a.gridLevels = std::move(r.grid.grid);
  a.gridRow = long(r.grid_row);
  a.gridGroup = long(r.grid_group);
  a.singularValues = std::move(r.spectrum.sigma);
  a.ranks = std::move(r.ranks);
  a.errorAtRank = std::move(r.error_at_rank);
  a.miloRank = r.milo_rank;
  a.miloCurve = std::move(r.milo_curve);
  a.miloError = r.milo_error;
  return a;
}

}  // namespace moewb::gui

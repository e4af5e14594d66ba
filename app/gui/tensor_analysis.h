// SPDX-License-Identifier: MIT
#pragma once
#include <vector>

#include "moewb/catalog.h"
#include "moewb/progress.h"

namespace moewb::gui {

// What the inspector shows about one matrix, computed off the GUI thread by the core analysis functions
// (moewb/quant/analysis.h, the same `moewb spectrum` prints): the histogram with the quantization grid of
// the widest group (where outliers stretch the grid most), the singular values of the HQQ residual and
// the error a rank-r compensator of that residual would leave.
struct TensorAnalysis {
  std::size_t matrix = 0;
  int bits = 3, group = 64;
  double histLo = 0, histHi = 0;
  std::vector<uint64_t> histogram;
  std::vector<double> gridLevels;
  long gridRow = 0, gridGroup = 0;
  std::vector<double> singularValues;  // descending
  std::vector<int> ranks;
  std::vector<double> errorAtRank;
  int miloRank = 0;               // rank of the MiLo preview (the assigned one, 16 when none)
  std::vector<double> miloCurve;  // ε_t of MiLo on this matrix alone
  double miloError = 0;           // error of what MiLo stores (INT3 compensators)
};

// `miloRank` > 0 also runs MiLo on the matrix (core quantizeMatrix) for the convergence preview.
// Runs as a JobRunner job (InspectorPanel): reports through `progress` and throws moewb::Cancelled when it
// returns false (the singular values of a large matrix take a minute).
TensorAnalysis analyseMatrix(const ModelCatalog& catalog, std::size_t matrix, int bits, int group,
                             int miloRank, const ProgressFn& progress = {});

}  // namespace moewb::gui

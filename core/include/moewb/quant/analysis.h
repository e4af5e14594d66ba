// SPDX-License-Identifier: MIT
#pragma once
#include <cstdint>
#include <vector>

#include "moewb/progress.h"
#include "moewb/quant/grouped_quant.h"

namespace moewb::quant {

// Singular values of the quantization residual R = W - dequant(Q) and what they imply.
struct ResidualSpectrum {
  std::vector<double> sigma;              // descending, all min(rows, cols) of them
  std::vector<double> cumulative_energy;  // [i] = sum_{j<=i} sigma_j^2 / sum sigma^2
  double weight_norm = 0;                 // ||W||_F
  double residual_norm = 0;               // ||R||_F
};
// The singular values take a while for large matrices: `progress` hears about them and returning false
// stops the work (moewb::Cancelled).
ResidualSpectrum residualSpectrum(const MatrixRM& w, const GroupedQuantized& q, int threads = 1,
                                  const ProgressFn& progress = {});

// Count of sigma_i >= tau * sigma_max (MiLo's residual rank at threshold tau).
int rankAtTau(const std::vector<double>& sigma, double tau);

// Relative error ||W - dequant(Q) - R_r|| / ||W|| after adding the best rank-r approximation R_r of the
// residual, for each r in `ranks` (Eckart-Young: the tail energy of the spectrum; one MiLo step without
// re-quantisation).
std::vector<double> errorVsRank(const ResidualSpectrum& s, const std::vector<int>& ranks);

// A histogram of the values of W together with one group's quantization grid: where the levels of
// (code - zero) * scale fall against the distribution (MiLo Fig. 2/4: INT3 loses the moderate values).
struct GroupGridHistogram {
  double lo = 0, hi = 0;            // histogram range (min/max of W)
  std::vector<uint64_t> counts;     // equal-width bins over [lo, hi]
  std::vector<double> grid;         // the 2^bits dequantised levels of the group
  std::vector<float> group_values;  // the group's weights
  int64_t row = 0, group = 0;
};
GroupGridHistogram groupGridHistogram(const MatrixRM& w, const GroupedQuantized& q, int64_t row,
                                      int64_t group, int bins = 128);

}  // namespace moewb::quant

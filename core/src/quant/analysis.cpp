// SPDX-License-Identifier: MIT
#include "moewb/quant/analysis.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "moewb/error.h"
#include "moewb/quant/low_rank.h"

namespace moewb::quant {

ResidualSpectrum residualSpectrum(const MatrixRM& w, const GroupedQuantized& q, int threads,
                                  const ProgressFn& progress) {
  MatrixRM residual = w;
  dequantizeInto(q, residual, -1.0f);
  ResidualSpectrum s;
  const Eigen::VectorXd sv = singularValues(residual, threads, progress);
  s.sigma.assign(sv.data(), sv.data() + sv.size());
  double total = 0;
  for (double x : s.sigma) total += x * x;
  double run = 0;
  for (double x : s.sigma) {
    run += x * x;
    s.cumulative_energy.push_back(total > 0 ? run / total : 1.0);
  }
  s.weight_norm = frobeniusNorm(w);
  s.residual_norm = frobeniusNorm(residual);
  return s;
}

int rankAtTau(const std::vector<double>& sigma, double tau) {
  if (sigma.empty()) return 0;
  const double cut = tau * sigma.front();
  return int(std::count_if(sigma.begin(), sigma.end(), [&](double x) { return x >= cut; }));
}

std::vector<double> errorVsRank(const ResidualSpectrum& s, const std::vector<int>& ranks) {
  std::vector<double> tail(s.sigma.size() + 1, 0.0);  // tail[r] = sum_{i>=r} sigma_i^2
  for (std::size_t i = s.sigma.size(); i-- > 0;) tail[i] = tail[i + 1] + s.sigma[i] * s.sigma[i];
  std::vector<double> out;
  for (int r : ranks) {
    const std::size_t k = std::size_t(std::clamp<int>(r, 0, int(s.sigma.size())));
    out.push_back(s.weight_norm > 0 ? std::sqrt(tail[k]) / s.weight_norm : 0.0);
  }
  return out;
}

GroupGridHistogram groupGridHistogram(const MatrixRM& w, const GroupedQuantized& q, int64_t row,
                                      int64_t group, int bins) {
  if (row < 0 || row >= q.rows || group < 0 || group >= q.groupsPerRow())
    throw Error(fmt::format("group ({}, {}) is outside the {}x{} groups of the matrix", row, group, q.rows,
                            q.groupsPerRow()));
  if (bins < 1) throw Error("histogram needs at least one bin");
  GroupGridHistogram h;
  h.row = row;
  h.group = group;
  h.lo = w.minCoeff();
  h.hi = w.maxCoeff();
  h.counts.assign(std::size_t(bins), 0);
  const double width = (h.hi - h.lo) / bins;
  for (Eigen::Index i = 0; i < w.size(); ++i) {
    const double x = w.data()[i];
    const int b = width > 0 ? std::min(bins - 1, int((x - h.lo) / width)) : 0;
    ++h.counts[std::size_t(b)];
  }
  const std::size_t gi = std::size_t(row * q.groupsPerRow() + group);
  for (int c = 0; c <= q.maxCode(); ++c) h.grid.push_back((double(c) - q.zeros[gi]) * q.scales[gi]);
  const int64_t c0 = group * q.group, n = std::min<int64_t>(q.group, q.cols - c0);
  h.group_values.assign(w.data() + row * q.cols + c0, w.data() + row * q.cols + c0 + n);
  return h;
}

}  // namespace moewb::quant

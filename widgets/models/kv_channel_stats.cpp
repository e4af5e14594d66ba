// SPDX-License-Identifier: MIT
#include "models/kv_channel_stats.h"

#include <algorithm>
#include <cmath>

namespace moewb::gui {

ChannelMagnitudes channelMagnitudes(const engine::KvCapture& c, KvTensor tensor, int layer, int kvHead) {
  ChannelMagnitudes out;
  if (layer < 0 || layer >= c.layers || c.length == 0) return out;
  const bool keys = tensor == KvTensor::Keys;
  const std::vector<float>& x = keys ? c.keys : c.values;
  const int dim = keys ? c.key_dim : c.value_dim;
  const int first = kvHead == kAllKvHeads ? 0 : kvHead;
  const int last = kvHead == kAllKvHeads ? c.kv_heads - 1 : kvHead;
  if (first < 0 || last >= c.kv_heads) return out;
  for (int h = first; h <= last; ++h) {
    // [layers, kv_heads, length, dim], the layout of kv_capture.h
    const std::size_t plane = (std::size_t(layer) * std::size_t(c.kv_heads) + std::size_t(h)) *
                              std::size_t(c.length) * std::size_t(dim);
    for (int d = 0; d < dim; ++d) {
      double mx = 0, sum = 0;
      for (int64_t t = 0; t < c.length; ++t) {
        const double v = std::abs(double(x[plane + std::size_t(t) * std::size_t(dim) + std::size_t(d)]));
        mx = std::max(mx, v);
        sum += v;
      }
      out.maxAbs.push_back(mx);
      out.meanAbs.push_back(sum / double(c.length));
    }
  }
  return out;
}

std::vector<int> outlierChannels(const std::vector<double>& maxAbs, double factor, double* threshold) {
  std::vector<int> out;
  if (maxAbs.empty()) {
    if (threshold) *threshold = std::nan("");
    return out;
  }
  std::vector<double> sorted = maxAbs;
  std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(sorted.size() / 2), sorted.end());
  const double level = factor * sorted[sorted.size() / 2];
  for (std::size_t i = 0; i < maxAbs.size(); ++i)
    if (maxAbs[i] > level) out.push_back(int(i));
  if (threshold) *threshold = level;
  return out;
}

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#include "moewb/engine/kv_stats.h"

#include <algorithm>
#include <cmath>

namespace moewb::engine {

ChannelMagnitudes channelMagnitudes(const KvCapture& c, KvTensor tensor, int layer, int kv_head) {
  ChannelMagnitudes out;
  if (layer < 0 || layer >= c.layers || c.length == 0) return out;
  const bool keys = tensor == KvTensor::Keys;
  const std::vector<float>& x = keys ? c.keys : c.values;
  const int dim = keys ? c.key_dim : c.value_dim;
  const int first = kv_head == kAllKvHeads ? 0 : kv_head;
  const int last = kv_head == kAllKvHeads ? c.kv_heads - 1 : kv_head;
  if (first < 0 || last >= c.kv_heads || dim <= 0) return out;
  const std::size_t length = static_cast<std::size_t>(c.length);
  if (x.size() < static_cast<std::size_t>(c.layers) * static_cast<std::size_t>(c.kv_heads) * length *
                     static_cast<std::size_t>(dim))
    return out;
  for (int h = first; h <= last; ++h) {
    // [layers, kv_heads, length, dim], the layout of kv_capture.h
    const std::size_t plane = (static_cast<std::size_t>(layer) * static_cast<std::size_t>(c.kv_heads) +
                               static_cast<std::size_t>(h)) *
                              length * static_cast<std::size_t>(dim);
    for (int d = 0; d < dim; ++d) {
      double mx = 0, sum = 0, sq = 0;
      for (std::size_t t = 0; t < length; ++t) {
        const double v = x[plane + t * static_cast<std::size_t>(dim) + static_cast<std::size_t>(d)];
        mx = std::max(mx, std::abs(v));
        sum += std::abs(v);
        sq += v * v;
      }
      out.max_abs.push_back(mx);
      out.mean_abs.push_back(sum / static_cast<double>(length));
      out.rms.push_back(std::sqrt(sq / static_cast<double>(length)));
    }
  }
  return out;
}

OutlierChannels outlierChannels(std::span<const double> max_abs, double factor) {
  OutlierChannels out;
  if (max_abs.empty()) {
    out.threshold = std::nan("");
    return out;
  }
  std::vector<double> sorted(max_abs.begin(), max_abs.end());
  const auto middle = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
  std::nth_element(sorted.begin(), middle, sorted.end());
  out.threshold = factor * *middle;
  for (std::size_t i = 0; i < max_abs.size(); ++i)
    if (max_abs[i] > out.threshold) out.channels.push_back(static_cast<int>(i));
  return out;
}

KvLayerChannels kvLayerChannels(const KvCapture& capture, int layer, double factor) {
  KvLayerChannels out;
  out.layer = layer;
  const ChannelMagnitudes k = channelMagnitudes(capture, KvTensor::Keys, layer, kAllKvHeads);
  const ChannelMagnitudes v = channelMagnitudes(capture, KvTensor::Values, layer, kAllKvHeads);
  out.key_outliers = outlierChannels(k.max_abs, factor);
  out.value_outliers = outlierChannels(v.max_abs, factor);
  if (!k.max_abs.empty()) {
    const auto peak = std::max_element(k.max_abs.begin(), k.max_abs.end());
    out.peak_key_channel = static_cast<int>(peak - k.max_abs.begin());
    double rms = 0;
    for (double r : k.rms) rms += r;
    rms /= static_cast<double>(k.rms.size());
    out.peak_key_over_rms = *peak / std::max(rms, 1e-20);
  }
  return out;
}

}  // namespace moewb::engine

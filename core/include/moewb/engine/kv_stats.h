// SPDX-License-Identifier: MIT
#pragma once
#include <span>
#include <vector>

#include "moewb/engine/kv_capture.h"

namespace moewb::engine {

// Per-channel statistics of a K/V capture and the one definition of an outlier channel, used by
// `moewb kv` and the GUI's K/V channel view alike: what decides whether K/V can be quantized per channel
// or per token (KIVI, MoQAE: key outlier channels).

enum class KvTensor { Keys, Values };
// Every KV head of a layer, channels one after the other (channel index = head * dim + d).
constexpr int kAllKvHeads = -1;

// Magnitudes of one layer's cached keys or values per channel, over the prompt's positions.
struct ChannelMagnitudes {
  std::vector<double> max_abs;   // max |x| per channel
  std::vector<double> mean_abs;  // mean |x| per channel
  std::vector<double> rms;       // sqrt(mean x^2) per channel
};

// Channels of KV head `kv_head` of `layer`, or with kAllKvHeads every KV head's. Empty when the layer or
// head does not exist or the capture has no positions.
ChannelMagnitudes channelMagnitudes(const KvCapture& capture, KvTensor tensor, int layer, int kv_head);

// An outlier channel: its max |x| is above `factor` times the median channel's max |x| (the median is
// robust to the outliers themselves). The default factor is what the GUI starts with and `moewb kv` uses
// unless --outlier-factor says otherwise.
constexpr double kDefaultOutlierFactor = 3.0;
struct OutlierChannels {
  std::vector<int> channels;  // ascending indices into max_abs
  double threshold = 0;       // factor * median max |x|; NaN when there are no channels
};
OutlierChannels outlierChannels(std::span<const double> max_abs, double factor = kDefaultOutlierFactor);

// One layer's summary over all its KV heads (what `moewb kv` prints per layer).
struct KvLayerChannels {
  int layer = 0;
  OutlierChannels key_outliers, value_outliers;
  int peak_key_channel = 0;      // the K channel with the largest max |x|
  double peak_key_over_rms = 0;  // its max |x| over the mean of the K channels' RMS
};
KvLayerChannels kvLayerChannels(const KvCapture& capture, int layer, double factor = kDefaultOutlierFactor);

}  // namespace moewb::engine

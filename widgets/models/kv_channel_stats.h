// SPDX-License-Identifier: MIT
#pragma once
#include <vector>

#include "moewb/engine/kv_capture.h"

namespace moewb::gui {

// Per-channel magnitudes of the cached keys or values of one layer, over the prompt's positions: what
// decides whether K/V can be quantized per channel or per token (KIVI, MoQAE: key outlier channels).
struct ChannelMagnitudes {
  std::vector<double> maxAbs;   // max |x| per channel
  std::vector<double> meanAbs;  // mean |x| per channel
};

enum class KvTensor { Keys, Values };
constexpr int kAllKvHeads = -1;

// Channels of one KV head, or with kAllKvHeads every KV head's channels one after the other
// (channel index = head * dim + d).
ChannelMagnitudes channelMagnitudes(const engine::KvCapture& capture, KvTensor tensor, int layer, int kvHead);

// Outlier channels: max |x| above `factor` times the median channel's max |x| (robust to the outliers
// themselves). `threshold`, when given, receives that level.
std::vector<int> outlierChannels(const std::vector<double>& maxAbs, double factor,
                                 double* threshold = nullptr);

}  // namespace moewb::gui

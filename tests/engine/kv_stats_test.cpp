// SPDX-License-Identifier: MIT
// K/V channel statistics and the outlier-channel definition (core, used by `moewb kv` and the GUI's
// channel view): a hand-made cache with one known outlier channel, and the CLI's summary of a real capture.
#include "moewb/engine/kv_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace moewb::engine {
namespace {

// 2 layers, 2 KV heads, 5 positions, key_dim 4, value_dim 3. Every key is +-1 except channel 2 of KV head
// 1 in layer 1, which reaches 10 (one position) — the outlier; values are 0.5 everywhere.
KvCapture handMadeCapture() {
  KvCapture c;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.key_dim = 4;
  c.value_dim = 3;
  c.length = 5;
  c.keys.resize(std::size_t(c.layers * c.kv_heads * c.length * c.key_dim));
  for (std::size_t i = 0; i < c.keys.size(); ++i) c.keys[i] = i % 2 ? 1.0f : -1.0f;
  // [layers, kv_heads, length, key_dim]
  auto key = [&](int l, int h, int t, int d) -> float& {
    return c.keys[std::size_t(((l * c.kv_heads + h) * c.length + t) * c.key_dim + d)];
  };
  key(1, 1, 3, 2) = -10.0f;
  key(1, 1, 4, 2) = 4.0f;
  c.values.assign(std::size_t(c.layers * c.kv_heads * c.length * c.value_dim), 0.5f);
  return c;
}

TEST(KvStats, ChannelMagnitudesOverPositions) {
  const KvCapture c = handMadeCapture();
  const ChannelMagnitudes one = channelMagnitudes(c, KvTensor::Keys, 1, 1);
  ASSERT_EQ(one.max_abs.size(), 4u);
  EXPECT_DOUBLE_EQ(one.max_abs[2], 10.0);
  EXPECT_DOUBLE_EQ(one.mean_abs[2], (1 + 1 + 1 + 10 + 4) / 5.0);
  EXPECT_DOUBLE_EQ(one.rms[2], std::sqrt((1 + 1 + 1 + 100 + 16) / 5.0));
  EXPECT_DOUBLE_EQ(one.max_abs[0], 1.0);
  // All KV heads: head h's channel d is h * key_dim + d.
  const ChannelMagnitudes all = channelMagnitudes(c, KvTensor::Keys, 1, kAllKvHeads);
  ASSERT_EQ(all.max_abs.size(), 8u);
  EXPECT_DOUBLE_EQ(all.max_abs[1 * 4 + 2], 10.0);
  const ChannelMagnitudes v = channelMagnitudes(c, KvTensor::Values, 0, kAllKvHeads);
  ASSERT_EQ(v.max_abs.size(), 6u);
  EXPECT_DOUBLE_EQ(v.mean_abs[5], 0.5);
  // Outside the capture: nothing, never a crash.
  EXPECT_TRUE(channelMagnitudes(c, KvTensor::Keys, 2, 0).max_abs.empty());
  EXPECT_TRUE(channelMagnitudes(c, KvTensor::Keys, 0, 2).max_abs.empty());
}

// Guards the definition both the CLI and the GUI use: max |x| above factor x the median channel's.
TEST(KvStats, TheKnownOutlierChannelIsTheOnlyOne) {
  const KvCapture c = handMadeCapture();
  const OutlierChannels all = outlierChannels(channelMagnitudes(c, KvTensor::Keys, 1, kAllKvHeads).max_abs);
  EXPECT_EQ(all.channels, std::vector<int>{6});
  EXPECT_DOUBLE_EQ(all.threshold, kDefaultOutlierFactor * 1.0);
  EXPECT_EQ(outlierChannels(channelMagnitudes(c, KvTensor::Keys, 1, 1).max_abs).channels,
            std::vector<int>{2});
  EXPECT_TRUE(outlierChannels(channelMagnitudes(c, KvTensor::Keys, 0, kAllKvHeads).max_abs).channels.empty());
  // Above the level, not at it: a factor of 10 leaves the channel that reaches exactly 10 x median.
  EXPECT_TRUE(outlierChannels(channelMagnitudes(c, KvTensor::Keys, 1, 1).max_abs, 10.0).channels.empty());
  EXPECT_EQ(outlierChannels(channelMagnitudes(c, KvTensor::Keys, 1, 1).max_abs, 9.9).channels,
            std::vector<int>{2});
  // The level comes from the median, which the outlier itself does not move.
  EXPECT_EQ(outlierChannels(std::vector<double>{1, 1, 1, 50, 1}, 3.0).channels, std::vector<int>{3});
  const OutlierChannels none = outlierChannels(std::vector<double>{});
  EXPECT_TRUE(none.channels.empty());
  EXPECT_TRUE(std::isnan(none.threshold));

  const KvLayerChannels layer = kvLayerChannels(c, 1);
  EXPECT_EQ(layer.key_outliers.channels, std::vector<int>{6});
  EXPECT_TRUE(layer.value_outliers.channels.empty());
  EXPECT_EQ(layer.peak_key_channel, 6);
  EXPECT_GT(layer.peak_key_over_rms, 3.0);
}

// `moewb kv --json` reports per layer the outlier channels core finds in the file it wrote.
TEST(KvStats, KvCommandReportsCoresOutlierChannels) {
  const auto dir = test::makeTempDir("kv-stats-cli");
  const std::string file = (dir / "kv.safetensors").string();
  std::string out, err;
  ASSERT_EQ(
      test::runCli("kv '" + test::demoModelDir().string() + "' --prompt 'def main(): return 42' --out '" +
                       file + "' --outlier-factor 2 --device cpu --json",
                   &out, &err),
      0)
      << err;
  const auto j = nlohmann::json::parse(out);
  const KvCapture capture = loadKvCapture(file);
  ASSERT_EQ(j.at("channels").size(), std::size_t(capture.layers));
  EXPECT_EQ(j.at("outlier_factor").get<double>(), 2.0);
  for (int l = 0; l < capture.layers; ++l) {
    const KvLayerChannels expected = kvLayerChannels(capture, l, 2.0);
    const auto& got = j.at("channels")[std::size_t(l)];
    EXPECT_EQ(got.at("layer").get<int>(), l);
    EXPECT_EQ(got.at("key_outlier_channels").get<std::vector<int>>(), expected.key_outliers.channels) << l;
    EXPECT_EQ(got.at("value_outlier_channels").get<std::vector<int>>(), expected.value_outliers.channels)
        << l;
    EXPECT_EQ(got.at("peak_key_channel").get<int>(), expected.peak_key_channel) << l;
  }
}

}  // namespace
}  // namespace moewb::engine

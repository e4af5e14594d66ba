// SPDX-License-Identifier: MIT
// The counted fixed-point words through which the stream-K kernel adds fp16 partial sums across CTAs
// (gpu/src/w3a16_counted_sum.h): whatever the order the contributions land in, a word decodes to the units
// counted so far, the poisoned contributions and the exact sum of the others. Host-side: runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "w3a16_counted_sum.h"

namespace {

using namespace moewb::gpu::detail;

// A contribution's value as the word holds it: p rounded to a multiple of 2^-24, in double.
double rounded(float p) { return std::nearbyint(double(p) * 16777216.0) / 16777216.0; }

TEST(CountedSum, DecodesUnitsPoisonAndExactSumInAnyOrder) {
  std::mt19937 rng(4242);
  std::uniform_int_distribution<int> contributors_d(1, kCountedMaxContributors);
  std::uniform_real_distribution<double> exponent_d(-30.0, 19.9);  // magnitudes 1e-9 .. ~1e6, below 2^20
  for (int trial = 0; trial < 2000; ++trial) {
    const int contributors = contributors_d(rng);
    const int pair_units = std::min(kCountedMaxUnits, contributors + int(rng() % 200));
    // Units per contributor: at least one each, the rest spread, summing to pair_units.
    std::vector<int> units(size_t(contributors), 1);
    for (int u = contributors; u < pair_units; ++u) ++units[rng() % units.size()];
    std::vector<float> partial(static_cast<size_t>(contributors));
    std::vector<bool> poison(size_t(contributors), false);
    double expected = 0;
    int poisoned = 0;
    for (size_t c = 0; c < partial.size(); ++c) {
      const double magnitude = std::exp2(exponent_d(rng));
      partial[c] = float((rng() & 1) ? magnitude : -magnitude);
      if (trial % 5 == 0 && rng() % 8 == 0) {  // some words get poison: NaN, inf or too large
        const float bad[] = {NAN, INFINITY, -INFINITY, kCountedLimit, -3e6f};
        partial[c] = bad[rng() % 5];
        poison[c] = true;
        ++poisoned;
      } else {
        expected += rounded(partial[c]);
      }
    }
    // Two orders of landing: the words must be identical (integer sums), and decode the same.
    std::vector<size_t> order(partial.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    uint64_t forward = 0, shuffled = 0;
    int counted_units = 0;
    for (size_t i : order) {
      forward += countedContribution(partial[i], units[i]);
      counted_units += units[i];
      const CountedSum partial_sum = decodeCounted(forward);
      ASSERT_EQ(partial_sum.units, counted_units) << "trial " << trial;
    }
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) shuffled += countedContribution(partial[i], units[i]);
    EXPECT_EQ(forward, shuffled) << "trial " << trial;
    const CountedSum sum = decodeCounted(forward);
    EXPECT_EQ(sum.units, pair_units) << "trial " << trial;
    EXPECT_EQ(sum.poisoned, poisoned) << "trial " << trial;
    EXPECT_EQ(double(sum.fixed) / 16777216.0, expected) << "trial " << trial;  // exact: integers below 2^53
    const float value = countedValue(sum);
    if (poisoned) {
      EXPECT_TRUE(std::isnan(value)) << "trial " << trial;
    } else {
      EXPECT_EQ(value, float(expected)) << "trial " << trial;
    }
  }
}

TEST(CountedSum, KeepsFp16ResolutionAndRejectsWhatItCannotHold) {
  // 2^-24 is the spacing of fp16 values at its smallest normal (2^-14): such values pass exactly.
  for (float p : {0.0f, 6.103515625e-05f, -6.103515625e-05f, 5.9604644775390625e-08f, 65504.0f, -65504.0f, 1048575.0f}) {
    const CountedSum s = decodeCounted(countedContribution(p, 3));
    EXPECT_EQ(s.units, 3);
    EXPECT_EQ(s.poisoned, 0) << p;
    EXPECT_EQ(countedValue(s), p);
  }
  // Below 2^-25 a contribution rounds to zero; the error of one is at most 2^-25.
  EXPECT_EQ(countedValue(decodeCounted(countedContribution(2e-8f, 1))), 0.0f);
  EXPECT_NEAR(countedValue(decodeCounted(countedContribution(0.1f, 1))), 0.1f, std::exp2(-25.0));
  // 2^20 and beyond, and what is not finite, are poison: the word's value is NaN.
  for (float p : {1048576.0f, -1048576.0f, 1e30f, INFINITY, NAN}) {
    const CountedSum s = decodeCounted(countedContribution(p, 2) + countedContribution(1.0f, 5));
    EXPECT_EQ(s.units, 7) << p;
    EXPECT_EQ(s.poisoned, 1) << p;
    EXPECT_EQ(double(s.fixed), 16777216.0) << p;
    EXPECT_TRUE(std::isnan(countedValue(s))) << p;
  }
  // The extremes together: 31 contributions of the largest magnitude, 255 units, all poisoned or none.
  uint64_t most = 0, least = 0, all_poison = 0;
  for (int c = 0; c < kCountedMaxContributors; ++c) {
    const int units = c == 0 ? kCountedMaxUnits - (kCountedMaxContributors - 1) : 1;
    most += countedContribution(1048575.9f, units);
    least += countedContribution(-1048575.9f, units);
    all_poison += countedContribution(NAN, units);
  }
  const CountedSum hi = decodeCounted(most), lo = decodeCounted(least), bad = decodeCounted(all_poison);
  EXPECT_EQ(hi.units, kCountedMaxUnits);
  EXPECT_EQ(lo.units, kCountedMaxUnits);
  EXPECT_EQ(hi.poisoned + lo.poisoned, 0);
  EXPECT_EQ(double(hi.fixed) / 16777216.0, 31.0 * double(1048575.9f));
  EXPECT_EQ(double(lo.fixed) / 16777216.0, -31.0 * double(1048575.9f));
  EXPECT_EQ(bad.units, kCountedMaxUnits);
  EXPECT_EQ(bad.poisoned, kCountedMaxContributors);
  EXPECT_EQ(bad.fixed, 0);
}

}  // namespace

// SPDX-License-Identifier: MIT
#pragma once
// Counted fixed-point sums: how the stream-K kernel (w3a16_streamk.cu) adds fp16 calls' partial sums
// across CTAs without counters. Each output element of a pair that several CTAs share has one 64-bit word
// in the scratch; a CTA adds to it, with one integer atomic, its partial sum in fixed point together with
// the number of the pair's units that it covered. A word whose unit count has reached the pair's units
// therefore holds the complete sum, whichever CTA reads it: no arrival counter, no release and acquire
// between the sums and a count, and one round trip from the last CTA's atomic to Y instead of three.
// Integer sums are also exact, so Y does not depend on the order the CTAs' atomics land in.
//
// Layout of a word (mod 2^64): units << 56 (8 bits: a pair has at most 255 units) plus poison << 50 plus
// the sum of the contributions in units of 2^-24. A contribution is a partial sum p, |p| < 2^20, rounded to
// a multiple of 2^-24 (the spacing of fp16 values at fp16's smallest normal): |p * 2^24| < 2^44. With at
// most 31 contributors per word (the launcher checks it) the sum stays below 2^49 in magnitude and the
// poison count (contributions that are not finite or not below 2^20) below 32, so the three fields
// decode exactly. Used for fp16 outputs only: bf16's range is far wider than 2^20.
#include <cmath>
#include <cstdint>

#include "host_device.h"

namespace moewb::gpu::detail {

constexpr int kCountedUnitShift = 56;
constexpr int kCountedPoisonShift = 50;
constexpr int kCountedMaxUnits = 255;
constexpr int kCountedMaxContributors = 31;
constexpr float kCountedLimit = 1048576.0f;      // 2^20: larger partial sums (and NaN, inf) are poison
constexpr float kCountedScale = 16777216.0f;     // 2^24
constexpr double kCountedUnscale = 1.0 / 16777216.0;

// The word a CTA adds for partial sum p over `units` of the pair's units.
MOEWB_HOST_DEVICE inline uint64_t countedContribution(float p, int units) {
  const uint64_t counted = uint64_t(units) << kCountedUnitShift;
  if (!(fabsf(p) < kCountedLimit)) return counted + (uint64_t(1) << kCountedPoisonShift);  // NaN too
#if defined(__CUDA_ARCH__)
  const long long fixed = __float2ll_rn(p * kCountedScale);  // p * 2^24 is exact; rounds below 2^-24
#else
  const long long fixed = std::llrint(p * kCountedScale);
#endif
  return counted + uint64_t(fixed);
}

struct CountedSum {
  int units;      // of the pair's units, summed so far
  int poisoned;   // contributions that were not finite or too large
  int64_t fixed;  // the sum of the others, in units of 2^-24
};

MOEWB_HOST_DEVICE inline CountedSum decodeCounted(uint64_t word) {
  // units = round(word / 2^56): the rest, poison << 50 plus the sum, lies within +-2^55.
  const uint64_t units = (word + (uint64_t(1) << (kCountedUnitShift - 1))) >> kCountedUnitShift;
  const int64_t rest = int64_t(word - (units << kCountedUnitShift));
  // poison = round(rest / 2^50): the sum lies within +-2^49 (an arithmetic shift, rest + 2^49 >= 0).
  const int64_t poisoned = (rest + (int64_t(1) << (kCountedPoisonShift - 1))) >> kCountedPoisonShift;
  return CountedSum{int(units), int(poisoned), rest - poisoned * (int64_t(1) << kCountedPoisonShift)};
}

// The output of a complete word: the exact sum rounded once to float (NaN where a contribution was poison).
MOEWB_HOST_DEVICE inline float countedValue(const CountedSum& s) {
  return s.poisoned ? NAN : float(double(s.fixed) * kCountedUnscale);
}

}  // namespace moewb::gpu::detail

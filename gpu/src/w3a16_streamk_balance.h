// SPDX-License-Identifier: MIT
#pragma once
// How the stream-K kernel (w3a16_streamk.cu) shares a call's work units among its CTAs: contiguous
// ranges split by cost, the same on the host (tests/gpu/w3a16_streamk_test.cpp checks that the ranges
// partition the units) and on the device.
#include <cstdint>

#include "host_device.h"

namespace moewb::gpu::detail {

// A CTA's time is about its units plus one flush per pair it touches (the CTA sums, the scratch
// atomics); a flush costs about three quarters of a unit at m = 1..32 (moewb_streamk_trace). So the
// ranges split the cost, not the units: every pair's first unit costs kUnitCost + flush_cost (in
// sixteenths of a unit), and a CTA whose range crosses a pair boundary gets a little less work.
// Measured against an even split of the units: 0.4-0.6 us faster at m = 16 and 32 on 4096x14336.
constexpr int kUnitCost = 16;
constexpr int kFlushCost = 12;
// A unit of the compensator's V whose row tiles are shared out to all eight warps (rank <= 32,
// w3a16_streamk.cu), besides its flush. (8/16, 2/16 and 0 measured no better on 4096x14336 at m = 1..16.)
constexpr int kVRowTilesCost = 4;

struct StreamKSplit {
  int units = 0;   // the weight's units (pairs * chunks)
  int chunks = 0;  // units per pair; also the number of V's units with a compensator
  int pairs = 0;
  int grid = 0;
  int flush_cost = 0;  // streamKFlushCost
  bool compensator = false;
  // What the split charges (streamKSplitFor): a pair's first unit beyond kUnitCost (its flush), and a
  // unit of V with its flush into T.
  int first_extra = 0;
  int v_unit_cost = kUnitCost;
};

// With fewer than about three units per CTA a flush-weighted split would leave CTAs without work.
MOEWB_HOST_DEVICE inline int streamKFlushCost(int units, int grid) {
  return units >= 3 * grid ? kFlushCost : 0;
}

// V's units (compensator) go round-robin to the first CTAs (V's chunk j to CTA j % grid): how many CTAs
// 0..c-1 have, and how many CTA c has.
MOEWB_HOST_DEVICE inline int vUnitsBefore(const StreamKSplit& s, int c) {
  if (!s.compensator) return 0;
  const int extra = s.chunks % s.grid;
  return (s.chunks / s.grid) * c + (c < extra ? c : extra);
}
MOEWB_HOST_DEVICE inline int vUnitsOf(const StreamKSplit& s, int c) {
  return vUnitsBefore(s, c + 1) - vUnitsBefore(s, c);
}

// The split of a call, as both the launcher (for the bound on a CTA's iterations) and the kernel build it.
// v_row_tiles: V's row tiles shared out to all warps (rank <= 32, w3a16_streamk.cu), which makes its units
// cheaper where the CTAs' iterations are bound by their work (three units or more per CTA: flush_cost > 0);
// with fewer, an iteration costs about its latency whatever it holds.
//
// iterations_first (two CTAs per SM, m <= 16): the extras (the pairs' flushes, V's beyond a unit) only
// move units between CTAs, and a CTA given one iteration more than the others ends about an iteration
// later (moewb_streamk_trace, 4096x14336 at m = 16 with the compensator: 1848 iterations on 264 CTAs,
// exactly 7 each, but the flushes' charges gave ten CTAs 8, whose loops ended 1.5 us after the median and
// held up the call). So the extras are scaled down to the slack of the iterations, what ceil(iterations /
// grid) per CTA leaves: no CTA then gets more than that many. Compensated calls 0.25-0.6 us faster at
// m = 1..16 on the Mixtral shapes, the plain ones unchanged; at one CTA per SM (m > 16), where an
// iteration of V and a flush cost more than their share of an iteration, 0.6-1.4 us slower at m = 32.
// (H100; the measurements are in the git log of this file.)
MOEWB_HOST_DEVICE inline StreamKSplit streamKSplitFor(int units, int chunks, int pairs, int grid, int flush_cost,
                                                      bool compensator, bool v_row_tiles, bool iterations_first) {
  const int v_cost = compensator && v_row_tiles && flush_cost > 0 ? kVRowTilesCost : kUnitCost;
  StreamKSplit s{units, chunks, pairs, grid, flush_cost, compensator, flush_cost, v_cost + flush_cost};
  if (!iterations_first) return s;
  const int v_units = compensator ? chunks : 0;
  const int iterations = units + v_units;
  const int slack = (iterations + grid - 1) / grid * grid - iterations;
  // 32-bit (as everywhere here): excess < 2^31 for any n and k below 2^24, room * 12 < 2^31 for any grid.
  const uint32_t excess = uint32_t(flush_cost) * pairs + uint32_t(s.v_unit_cost - kUnitCost) * v_units;
  const uint32_t room = uint32_t(kUnitCost) * slack;
  if (excess > room) {  // scaled down, rounding down: the total never exceeds the room
    s.first_extra = int(flush_cost * room / excess);
    s.v_unit_cost = kUnitCost + int(uint32_t(s.v_unit_cost - kUnitCost) * room / excess);
  }
  return s;
}

// What a pair's first unit costs beyond kUnitCost: the pair's flush.
MOEWB_HOST_DEVICE inline uint32_t streamKFirstUnitExtra(const StreamKSplit& s) { return uint32_t(s.first_extra); }

// The cost of the whole call: the weight's units, their pairs' first-unit extras and, with a compensator,
// V's units, each with its own flush (into T). (A V unit cost 1.75 units more at m <= 8 while its flush
// waited for T's counter; since nobody waits for that counter in the loop, it costs what a weight unit
// does, measured 0.1-0.4 us faster than with the extra cost; less where its row tiles are shared out.)
MOEWB_HOST_DEVICE inline uint32_t streamKVUnitCost(const StreamKSplit& s) { return uint32_t(s.v_unit_cost); }
MOEWB_HOST_DEVICE inline uint32_t streamKTotalCost(const StreamKSplit& s) {
  return kUnitCost * uint32_t(s.units) + streamKFirstUnitExtra(s) * s.pairs +
         (s.compensator ? streamKVUnitCost(s) * s.chunks : 0u);
}

// The weight unit at which a range of the given cost (from the first unit) ends. 32-bit arithmetic:
// 64-bit divisions made every CTA's start 0.2 us later.
MOEWB_HOST_DEVICE inline int weightUnitAtCost(uint32_t cost, uint32_t chunks, uint32_t first_extra) {
  const uint32_t pair_cost = kUnitCost * chunks + first_extra;
  const uint32_t q = cost / pair_cost, r = cost - q * pair_cost;
  const uint32_t j = r + kUnitCost / 2 <= first_extra ? 0 : (r + kUnitCost / 2 - first_extra) / kUnitCost;
  return int(q * chunks + (j > chunks ? chunks : j));
}

// total * part / whole without overflow (part <= whole < 2^16).
MOEWB_HOST_DEVICE inline uint32_t proportion(uint32_t total, uint32_t part, uint32_t whole) {
  return total / whole * part + total % whole * part / whole;
}

// The first weight unit of CTA c (c = grid: the number of units). CTA c's share of the whole cost
// (the weight's units, V's units, their flushes) is its V units plus its weight range.
MOEWB_HOST_DEVICE inline int streamKWeightStart(const StreamKSplit& s, int c) {
  const uint32_t cost = proportion(streamKTotalCost(s), c, s.grid) - streamKVUnitCost(s) * vUnitsBefore(s, c);
  return weightUnitAtCost(cost, s.chunks, streamKFirstUnitExtra(s));
}

// An upper bound on any CTA's iterations (its V units and weight units), hence on its flushes: a range
// costs at most its share plus one, every unit costs at least kUnitCost, and rounding to whole units adds
// at most one at each end.
MOEWB_HOST_DEVICE inline int streamKMaxIterations(const StreamKSplit& s) {
  return int(streamKTotalCost(s) / (kUnitCost * uint32_t(s.grid))) + 3 +
         vUnitsOf(s, 0);  // CTA 0 has the most V units
}

}  // namespace moewb::gpu::detail

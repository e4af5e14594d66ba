// SPDX-License-Identifier: MIT
// Stream-K W3A16 kernel: Y[m, n] = X[m, k] * dequant(W)[n, k]^T (+ (X V^T) U^T with INT3 U, V) for fp16 or
// bf16 activations, m = 1..64. Design notes and measurements: docs/w3a16-kernel.md ("stream-K kernel").
//
// Why this shape. At small batch the product is a stream of 3-bit weights, and a microbenchmark on the H100
// (25.7 MB per call, graph of back-to-back calls) showed what streams best: one wave of long-lived CTAs
// (two 256-thread CTAs per SM), each reading one contiguous range through a cp.async ring of ~12 KB stages,
// with programmatic dependent launch: 8.7 us, against 12.9-14.7 us for the loads alone of the grid of the
// split-k kernel this one replaced (528 short CTAs of 7 groups each). With the decoder and the mma the
// kernel is bound by both: the timeline of one call (the moewb_streamk_trace probe, in git history) shows
// ~7 units per CTA, each ~1.3 us of issue-bound work, after the first stage arrives, and with every stage of
// every CTA requested at once the first one arrives only when most of them have (5.4 us with a ring of 5,
// 3.2 us with 3): so the ring is 3 deep at m <= 8 (-1.4 us per call), and the decoder applies scale and
// zero once per group after the mma (blockProductGroupScaled).
//
//  * Work unit = 2 strips (128 rows) x 4 groups (256 of k): 8 blocks of 64x64, one per warp; warp w takes
//    strip 2P + w/4, group 4c + w%4. Per strip the 4 blocks are adjacent in the kernel layout, so a unit
//    is two contiguous 6 KB runs. Units are ordered pair-major; CTA i takes a contiguous range of about
//    U/grid of them, split by cost (units plus flushes: w3a16_streamk_balance.h; stream-K: ranges cross
//    pair boundaries).
//  * A stage holds the unit's 8 blocks, their scales (and biases) and X of the 4 groups (padded rows for
//    ldmatrix). The decoder and mma.sync math are in w3a16_device.cuh: blockProductGroupScaled at m <= 8,
//    blockProduct (the lane's scales and biases as broadcast pairs) above that.
//  * When the unit's pair changes (or the range ends) the CTA reduces its 8 warps' fp32 accumulators in
//    shared memory and flushes: a pair it covered entirely is written straight to Y; otherwise the sums go
//    to the fp32 scratch with (vector) atomics, and at the end of its range the CTA adds its unit counts
//    to the pairs' counters; the CTA that completes a count converts the pair to Y and clears the scratch.
//    (At m = 1 in fp16, kWarpFlush, each warp adds its own sums into the scratch: flushPair.) In fp16
//    without a compensator at m <= 16 (countedSumsApply) the shared pairs' sums are counted fixed-point
//    words instead (kCounted, w3a16_counted_sum.h): the CTAs add theirs and leave, and the CTA holding a
//    pair's last unit waits for the pair's words to be complete and converts them (finishCounted).
//  * Compensator (INT3 U and V, MiLo's storage): V, padded to 64 or 128 rows, is streamed first (its units
//    the first iterations of the lowest CTAs), its sums going to an fp32 T = X V^T with a counter that
//    nobody waits for there. At the end of its range a CTA with few pending pairs computes T U^T (U decoded
//    like a weight: n rows x rank columns) of each of them while its arrivals are in flight, and adds it
//    to the pairs it completes as it converts them (speculateCompensator); otherwise whichever CTA
//    completes a pair computes T U^T after the arrival. Either first checks that T is complete (it always
//    was in the measured calls; otherwise it waits for T, whose units run first in CTAs dispatched before
//    it). U is read once per call by the CTAs that complete pairs.
#include "w3a16_streamk.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <string>
#include <type_traits>

#include "cuda_check.h"
#include "kernel_launch.h"
#include "w3a16_counted_sum.h"
#include "w3a16_device.cuh"
#include "w3a16_streamk_balance.h"

namespace moewb::gpu::detail {
namespace {

using namespace w3a16dev;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxM = 64;
constexpr int kTCols = 128;                       // T = X V^T scratch: [kMaxM][kTCols] fp32
constexpr int kMaxPending = 16;                   // deferred pair arrivals per CTA without a compensator
constexpr int kStartTable = 384;                  // CTA ranges passed as kernel parameters (3 KB)
// The CTA's sums of one pair in shared memory are batch-major, [MP][kSumStride] with 128 rows and 4 of
// padding: the mma fragments' lanes (rows g, batch columns 2t) then hit 32 distinct banks (8t + g), and the
// conversion loops (consecutive rows) too. Row-major [128][MP] had 8- to 32-way conflicts that cost 2.4 us
// per flush and 4-5 us per finished pair at m = 16, 5.8 and 9 us at m = 32 (moewb_streamk_trace).
constexpr int kSumStride = 128 + 4;
// At m <= 32 each of the four warps of a strip (one k group of the unit each) stores its sums into a tile
// of its own and the quads add the four tiles: one barrier per flush instead of four turns of adds. At
// m = 33..64 the four tiles do not fit beside the ring, and the warps add into one tile in turn.
__host__ __device__ constexpr int sumTiles(int nt) { return nt <= 4 ? 4 : 1; }
constexpr int kStageWU4 = kWarps * kBlockU4;      // 768 vectors of weights per stage
constexpr int kStageSU4 = kWarps * 2 * kScaleU4;  // 128 vectors of scales and biases
// X of a stage: [nt*8 rows][33 vectors], a row's 4 groups (its 512 contiguous bytes in X) and one vector of
// padding (xChunk<kXRow> in w3a16_device.cuh); group j's tile starts at vector 8 j of the row.
constexpr int kXRow = 33;
constexpr int kXGroupU4 = 8;
__host__ __device__ constexpr int xStageU4(int nt) { return nt * 8 * kXRow; }
__host__ __device__ constexpr int stageU4(int nt) { return kStageWU4 + kStageSU4 + xStageU4(nt); }
// Ring depth. Deeper rings stream better alone but delay every CTA's first stage (all are requested at
// once): at m <= 8, 3 stages measured 1.4 us faster per call than 5 and 0.3 us faster than 2; at m = 16,
// 3 measured 0.7 us faster than 4.
__host__ __device__ constexpr int stagesFor(int) { return 3; }
// Two CTAs per SM cap a thread at 128 registers: enough up to m = 16; at m = 17..32 the accumulators
// spilled (one CTA per SM measured 50 instead of 64 us at m = 32, 66 instead of 125 us with a compensator).
__host__ __device__ constexpr int ctasPerSm(int nt) { return nt <= 2 ? 2 : 1; }
// Whether V's two row tiles per block that are not padding (rank <= 32) are shared out to all eight warps
// (w3a16StreamKKernel's iteration). Not at m = 17..32: the variants compiled with it ran 1-1.4 us slower with
// a compensator on the Mixtral shapes.
__host__ __device__ constexpr bool vRowTilesFor(int nt, int rank) { return nt != 4 && rank <= 32; }
// Whether the split gives every CTA at most ceil(iterations / grid) iterations (streamKSplitFor): at two
// CTAs per SM; at one (m > 16) the flushes' charges measured faster.
__host__ __device__ constexpr bool iterationsFirstFor(int nt) { return ctasPerSm(nt) > 1; }

struct Params {
  const void* x;
  void* y;
  const uint4* w;
  const uint4* s;
  const uint4* b;
  const uint4* vw;
  const uint4* vs;
  const uint4* uw;
  const uint4* us;
  float* partials;  // [kMaxM][n] fp32 sums of the pairs that several CTAs share, zero between calls
  float* tacc;      // [kMaxM][kTCols]
  int* counters;    // [0, pairs): units arrived per pair; [pairs]: V's units (T); [pairs + 1]: pairs finished
  int m, n, k, rank, v_rows, u_groups;
  int groups, chunks, pairs, units;  // chunks = units per pair, units = pairs * chunks (V's not counted)
  int flush_cost;                    // streamKFlushCost (w3a16_streamk_balance.h)
  int pend_cap;                      // with a compensator: streamKMaxIterations, the CTA's most pending arrivals
  // The CTAs' first weight units (x: streamKWeightStart of CTA 0..grid, y: its pair) when grid <
  // kStartTable, else starts[0].x = -1 and every CTA computes its own: the split's integer divisions
  // were ~150 dependent instructions ahead of every CTA's first copy (0.45 us per call at m = 1).
  int2 starts[kStartTable];
};
static_assert(sizeof(Params) <= 4096 - 256, "kernel parameters are limited to 4 KB");

// Release/acquire at GPU scope is all the counter protocol needs (the writer's sums before its arrival,
// the finisher's reads after it). V's flush into T counts itself with a release add that nobody waits
// for: one thread releases what the CTA wrote before a barrier. (A fence and a relaxed add held that
// thread, and with it the CTA's next iteration, for the round trip of the CTA's atomics.)
__device__ __forceinline__ void addRelease(int* address, int value) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(address), "r"(value) : "memory");
}
// An arrival: it releases the CTA's sums (written before a barrier) and acquires those of the earlier
// arrivals, so that the CTA that completes a count reads the pair's sums after a barrier. (Fences by every
// thread before and after the arrivals measured 0.3-0.75 us slower per call.)
__device__ __forceinline__ int loadAcquire(const int* address) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(address) : "memory");
  return v;
}
__device__ __forceinline__ int atomicAddAcqRel(int* address, int value) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(address), "r"(value) : "memory");
  return old;
}

// Counted sums (kCounted): a CTA's contribution to a scratch word, and the strong load that sees it (or a
// later value) when made by the same thread after it.
__device__ __forceinline__ void addCounted(uint64_t* address, uint64_t value) {
  asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;\n" ::"l"(address), "l"(value) : "memory");
}
__device__ __forceinline__ uint64_t loadCounted(const uint64_t* address) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(address) : "memory");
  return v;
}

// dst[0..3] += v (16-byte aligned): one vector atomic on sm_90, four before.
__device__ __forceinline__ void addQuad(float* dst, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(dst), v);
#else
  atomicAdd(dst, v.x);
  atomicAdd(dst + 1, v.y);
  atomicAdd(dst + 2, v.z);
  atomicAdd(dst + 3, v.w);
#endif
}

// CTA b's weight range [x, y) computed on the device (more CTAs than the launcher tabulates). Not inlined:
// inlined, the compiler computed it, divisions and all, ahead of every CTA's first copy and then picked
// the table's values. (The split is built here, not passed in: its charges take divisions that the
// kernel itself, which needs only the V units' count, then leaves out.)
__device__ __noinline__ int2 weightRangeOf(int units, int chunks, int pairs, int grid, int flush_cost,
                                           bool compensator, bool v_row_tiles, bool iterations_first, int b) {
  const StreamKSplit split =
      streamKSplitFor(units, chunks, pairs, grid, flush_cost, compensator, v_row_tiles, iterations_first);
  return make_int2(streamKWeightStart(split, b), streamKWeightStart(split, b + 1));
}

// kOneRow: a batch of one row (m = 1), whose odd batch columns the group epilogue skips at compile time
// (as a run-time choice the compiler predicated those FFMAs, which still took their issue slots).
// kWarpFlush: at m = 1 without a compensator, each warp adds its own sums into the scratch (flushPair).
// kCounted: fp16 without a compensator, the pairs' sums across CTAs as counted fixed-point words
// (w3a16_counted_sum.h) instead of fp32 sums and arrival counters.
template <typename T, int NT, bool kAsym, bool kComp, bool kOneRow, bool kWarpFlush, bool kCounted>
__global__ void __launch_bounds__(kThreads, ctasPerSm(NT)) w3a16StreamKKernel(const Params p) {
  using A = Act<T>;
  using T2 = typename A::T2;
  constexpr int STAGES = stagesFor(NT), MP = NT * 8, SU4 = stageU4(NT);
  // Scale and zero per group after the mma (fewer instructions per block) at m <= 8: at m = 16 its extra
  // registers spill with a compensator, and without one it measured 2 us slower (29.5 vs 27.6 us).
  constexpr bool kGroupScaled = NT == 1;
  extern __shared__ uint4 smem[];
  // The CTA sums of one pair: [kTiles][MP][kSumStride]
  constexpr int kTiles = sumTiles(NT), kTileFloats = MP * kSumStride;
  float* sacc = reinterpret_cast<float*>(smem + STAGES * SU4);
  uint4* ttile = smem + STAGES * SU4 + kTiles * kTileFloats / 4;  // compensator: T as B tiles
  __shared__ int s_flag, s_count, s_npending;
  // The pending arrivals (pair, units covered) and the list of pairs to finish. Without a compensator
  // they are static and the arrivals are made whenever kMaxPending are pending; with one, the finishing
  // code (T U^T) inside the loop made the compiler short of registers there (12-60 bytes of spills,
  // the loop 13% slower per unit), so every arrival waits for the end of the range, in dynamic shared
  // memory sized for the CTA's most iterations (one flush each at most).
  __shared__ int s_static_lists[kComp ? 1 : 2 * kMaxPending + kThreads];
  int* const lists = kComp ? reinterpret_cast<int*>(ttile + 2 * NT * 64) : s_static_lists;
  const int pend_cap = kComp ? p.pend_cap : kMaxPending;
  int* const s_pend_pair = lists;
  int* const s_pend_cov = lists + pend_cap;
  int* const s_list = lists + 2 * pend_cap;  // max(pend_cap, kThreads) entries

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4;
  // The CTA's iterations: first its share of V's units (compensator: chunks blockIdx.x + j*grid, so that
  // T = X V^T is complete after about one unit's time), then a contiguous range [u0, u1) of the weight's
  // units. V's units count in the balance: CTA b's share of the whole cost (weight units, V's units, their
  // flushes) is its V units plus its weight range.
  const int b = int(blockIdx.x), G = int(gridDim.x);
  static_assert(!kWarpFlush || (kOneRow && !kComp), "warps flush on their own at m = 1 without a compensator only");
  static_assert(!kCounted || (!kComp && !kWarpFlush && std::is_same_v<T, half>),
                "counted sums: fp16 (whose range they cover), without a compensator, flushed by the CTA");
  const bool v_row_tiles = kComp && vRowTilesFor(NT, p.rank);
  constexpr bool kIterationsFirst = iterationsFirstFor(NT);
  const int nv =
      vUnitsOf(streamKSplitFor(p.units, p.chunks, p.pairs, G, p.flush_cost, kComp, v_row_tiles, kIterationsFirst), b);
  const bool table = p.starts[0].x >= 0;
  int u0, u1;
  if (table) {
    u0 = p.starts[b].x;
    u1 = p.starts[b + 1].x;
  } else {
    const int2 range =
        weightRangeOf(p.units, p.chunks, p.pairs, G, p.flush_cost, kComp, v_row_tiles, kIterationsFirst, b);
    u0 = range.x;
    u1 = range.y;
  }
  const int iters = nv + u1 - u0;
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  const uint64_t evict_first = evictFirstPolicy();
  struct Unit {
    int pair, chunk;  // pair index within its matrix, group chunk
    bool v;           // a unit of the compensator's V (read through isV)
  };
  // Constant false without a compensator, so that the V unit's paths fold away (the symmetric bias of V
  // was otherwise computed next to the weight's in every block).
  auto isV = [](const Unit& un) { return kComp && un.v; };
  // V at rank <= 32 has two row tiles per block that are not padding: all eight warps take one each.
  auto vRowTiles = [&] { return vRowTilesFor(NT, p.rank); };
  // The unit's first 64x64 block (strip 2 pair, group 4 chunk); recomputed where used, which costs fewer
  // registers than carrying it (the compensator's variants spill otherwise).
  auto block0 = [&](const Unit& un) { return (2 * un.pair) * p.groups + 4 * un.chunk; };
  auto strips = [&](const Unit& un) { return isV(un) ? p.v_rows / 64 : p.n / 64; };  // of the unit's matrix
  // The CTA's units are walked in order, one step at a time: a division per unit (u / chunks) cost more
  // issue slots than the decoder of a block at m = 1, and the producer, the consumer and the flush test
  // each needed one. The first weight unit is recomputed (its pair from the launcher's table, or one
  // division) rather than kept in registers, which the compensator's variants lack.
  auto firstWeightUnit = [&] {
    const int pair = table ? p.starts[b].y : u0 / p.chunks;
    return Unit{pair, u0 - pair * p.chunks, false};
  };
  auto firstUnit = [&] { return nv > 0 ? Unit{0, b, true} : firstWeightUnit(); };
  auto nextWeightUnit = [&](Unit un) {  // the weight's unit after weight unit un
    if (++un.chunk == p.chunks) {
      un.chunk = 0;
      ++un.pair;
    }
    return Unit{un.pair, un.chunk, false};
  };
  auto nextUnit = [&](Unit un, int next_it) {  // the unit of iteration next_it, given that of next_it - 1
    if (kComp && next_it < nv) {
      un.chunk += G;
      return un;
    }
    if (kComp && next_it == nv) return firstWeightUnit();
    return nextWeightUnit(un);
  };

  // Two ways to copy a unit's weights and scales into a stage, each measured faster for some variants
  // (H100, 4096x14336 and 14336x4096): by warp, 0.3-0.5 us faster with a compensator at m <= 8 and at
  // m = 9..32 (fewer registers: one source per lane instead of three); by stage, without a compensator,
  // 0.4 us faster at m <= 8, 0.35-0.4 us at m = 9..16 and up to 0.5 us at m = 17..64 (there by warp
  // took ~100 instructions per unit and thread, its sources recomputed every unit).
  constexpr bool kLoadsByWarp = kComp;
  // Each warp copies its own block of a unit (vectors lane, lane + 32, lane + 64; lanes 0-7 its scales,
  // 8-15 its biases) from per-lane sources plus the unit's offset: the copies' places and sources differ
  // by constants, and one predicate per warp covers the matrix's edges.
  const int warp_block = (warp >> 2) * p.groups + (warp & 3);  // block offset within a unit
  const uint4* w_lane = p.w + warp_block * kBlockU4 + lane;
  const uint4* s_lane = (lane < 8 ? p.s : p.b) + warp_block * kScaleU4 + (lane & 7);
  const int s_place = kStageWU4 + (lane < 8 ? 0 : 8 * kScaleU4) + warp * kScaleU4 + (lane & 7);

  auto loadWeightsByWarp = [&](const Unit& un, int slot) {
    uint4* st = smem + slot * SU4;
    const int strips_left = strips(un) - 2 * un.pair, groups_left = p.groups - 4 * un.chunk;
    if ((warp >> 2) >= strips_left || (warp & 3) >= groups_left) return;  // past the matrix's edge
    const size_t blk = unsigned(block0(un));
    const uint4* wsrc = (isV(un) ? p.vw + warp_block * kBlockU4 + lane : w_lane) + blk * kBlockU4;
#pragma unroll
    for (int j = 0; j < 3; ++j) cpAsync16Stream(st + warp * kBlockU4 + lane + 32 * j, wsrc + 32 * j, evict_first);
    if (lane < 8 || (kAsym && !isV(un) && lane < 16)) {
      const uint4* ssrc = (isV(un) ? p.vs + warp_block * kScaleU4 + lane : s_lane) + blk * kScaleU4;
      cpAsync16(st + s_place, ssrc, true);
    }
  };
  // By stage (the variants without a compensator): thread tid copies vectors v, v + 128, v + 256
  // (v = tid % 128) of strip tid / 128 of the unit, whose 4 blocks are 384 contiguous vectors both in the
  // weight and in the stage: the three copies share one source address with immediate offsets. (Copying
  // vectors tid + 256 j of the stage, which cross the strips, took three 64-bit addresses per unit: ~20
  // more instructions per unit and thread at m = 1.) A whole unit (all but those at the matrix's last
  // strip or group) is copied without predicates (the predicated copies took ~60 instructions per unit).
  const int w_strip = tid >> 7, w_vec = tid & 127;
  auto wGroup = [&](int j) { return (w_vec + 128 * j) / kBlockU4; };  // the group offset of copy j
  const uint4* const w_thread = p.w + w_strip * p.groups * kBlockU4 + w_vec;
  const int w_place = w_strip * 4 * kBlockU4 + w_vec;
  const int s_wb = (tid & 63) >> 3;
  const int s_off = ((s_wb >> 2) * p.groups + (s_wb & 3)) * kScaleU4 + (tid & 7);
  const uint4* s_thread = (tid < 64 ? p.s : p.b) + s_off;
  const bool loads_scales = tid < 64 || (kAsym && tid < 128);

  auto loadWeightsByStage = [&](const Unit& un, int slot) {
    uint4* st = smem + slot * SU4;
    const int strips_left = p.n / 64 - 2 * un.pair, groups_left = p.groups - 4 * un.chunk;
    const size_t blk = unsigned(block0(un));
    const uint4* wsrc = w_thread + blk * kBlockU4;
    if (strips_left >= 2 && groups_left >= 4) {
#pragma unroll
      for (int j = 0; j < 3; ++j) cpAsync16Stream(st + w_place + 128 * j, wsrc + 128 * j, evict_first);
      if (loads_scales) cpAsync16(st + kStageWU4 + tid, s_thread + blk * kScaleU4, true);
      return;
    }
#pragma unroll
    for (int j = 0; j < 3; ++j)
      if (w_strip < strips_left && wGroup(j) < groups_left)
        cpAsync16Stream(st + w_place + 128 * j, wsrc + 128 * j, evict_first);
    if (loads_scales && (s_wb >> 2) < strips_left && (s_wb & 3) < groups_left)
      cpAsync16(st + kStageWU4 + tid, s_thread + blk * kScaleU4, true);
  };
  auto loadWeights = [&](const Unit& un, int slot) {
    if constexpr (kLoadsByWarp) {
      loadWeightsByWarp(un, slot);
    } else {
      loadWeightsByStage(un, slot);
    }
  };
  // X: thread tid copies vector tid % 32 of rows tid / 32 + 8 j (j < NT) of the unit's 4 groups, so a warp
  // copies a row's 512 contiguous bytes, and the copies differ from the thread's first by constants: in
  // shared memory an immediate offset, in X a multiple of 8 rows (per copy an add; the copies' indices
  // computed per unit took 40-90 instructions per unit and thread at m = 9..32). Rows past m are not
  // copied: they stay zero (cleared once, after the prologue's copies).
  const int x_row = tid >> 5, x_vec = tid & 31;
  const char* const x_thread = reinterpret_cast<const char*>(x + size_t(x_row) * p.k + x_vec * 8);
  const size_t x_rows8 = size_t(8) * p.k * sizeof(T);  // bytes from a thread's copy to its next
  const int x_place = xChunk<kXRow>(x_row, x_vec);
  auto loadActivations = [&](const Unit& un, int slot) {
    uint4* sx = smem + slot * SU4 + kStageWU4 + kStageSU4 + x_place;
    const char* src = x_thread + unsigned(un.chunk) * unsigned(256 * sizeof(T));
    const bool group_ok = (x_vec >> 3) < p.groups - 4 * un.chunk;
#pragma unroll
    for (int j = 0; j < NT; ++j)
      if (group_ok && x_row + 8 * j < p.m) cpAsync16(sx + j * 8 * kXRow, src + j * x_rows8, true);
  };

  float acc[4][NT][4];
  auto clearAcc = [&] { clearAccumulators<NT>(acc); };
  clearAcc();
  // (A single tile is added into, so it starts zero; the four tiles are stored into before every read.)
  if constexpr (kTiles == 1)
    for (int i = tid; i < kTileFloats; i += kThreads) sacc[i] = 0.f;
  if (tid == 0) s_npending = 0;

  // The warp's accumulators (rows of its strip, strip-local row = 64 * strip_local + ...) into tile
  // `tile` of sacc: stored (a tile of its own) or added (one tile, no other warp on the same rows then).
  // V at rank <= 32 (vRowTiles): warp w holds row tile w / 4 of V's strip in a[0].
  auto vRowTileSumsIntoShared = [&](const float (&a)[NT][4], int tile) {
    float* t = sacc + tile * kTileFloats + 16 * (warp >> 2);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e >> 1), mm = j * 8 + 2 * (lane % 4) + (e & 1);
        if (mm < p.m) {
          if constexpr (kTiles == 4) {
            t[mm * kSumStride + row] = a[j][e];
          } else {
            t[mm * kSumStride + row] += a[j][e];
          }
        }
      }
  };
  auto warpSumsIntoShared = [&](const float (&a)[4][NT][4], int strip_local, int tile) {
    float* t = sacc + tile * kTileFloats + strip_local * 64;
    forEachAccumulator<NT>(a, lane, [&](int row, int mm, float v) {
      if (mm < p.m) {
        if constexpr (kTiles == 4) {
          t[mm * kSumStride + row] = v;
        } else {
          t[mm * kSumStride + row] += v;
        }
      }
    });
  };

  // The sums of a pair (rows x m) are moved in quads: 4 consecutive rows of one batch row, lane l taking
  // rows 4l..4l+3, warp w batch rows w, w + 8, ...: no divisions (the loops over rows x m with a division
  // per element were the finishing CTAs' critical path at m >= 16), 16-byte accesses that are consecutive
  // across the warp in shared memory, the scratch and Y alike.
  const int quad_row = 4 * lane;
  auto quadOf = [&](int mm) {  // the CTA sums of the quad (the single tile is left zero)
    float* s = sacc + mm * kSumStride + quad_row;
    float4 v = *reinterpret_cast<const float4*>(s);
    if constexpr (kTiles == 4) {
#pragma unroll
      for (int t = 1; t < 4; ++t) {
        const float4 u = *reinterpret_cast<const float4*>(s + t * kTileFloats);
        v = make_float4(v.x + u.x, v.y + u.y, v.z + u.z, v.w + u.w);
      }
    } else {
      *reinterpret_cast<float4*>(s) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    return v;
  };
  const bool y_vectors = (reinterpret_cast<uintptr_t>(p.y) & 7) == 0;  // 8-byte stores of 4 outputs
  auto storeY = [&](int mm, int row, float4 v) {
    T* dst = y + size_t(mm) * p.n + row;
    if (y_vectors) {
      *reinterpret_cast<uint2*>(dst) = make_uint2(asU32(A::fromFloats(v.x, v.y)), asU32(A::fromFloats(v.z, v.w)));
    } else {
      dst[0] = A::fromFloat(v.x);
      dst[1] = A::fromFloat(v.y);
      dst[2] = A::fromFloat(v.z);
      dst[3] = A::fromFloat(v.w);
    }
  };

  // Counted sums (kCounted): element e of the thread's batch row mm = warp + 8 i of a pair is row
  // lane + 32 e, so that each of a warp's 64-bit atomics and loads covers 256 contiguous bytes (with the
  // quads' 32 bytes per lane, every atomic touched 32 sectors).
  uint64_t* const counted = reinterpret_cast<uint64_t*>(p.partials);
  auto countedSum = [&](int mm, int e) {  // the CTA's sum of the element (the single tile is left zero)
    float* s = sacc + mm * kSumStride + lane + 32 * e;
    float v = s[0];
    if constexpr (kTiles == 4) {
#pragma unroll
      for (int t = 1; t < 4; ++t) v += s[t * kTileFloats];
    } else {
      s[0] = 0.f;
    }
    return v;
  };
  auto countedIntoScratch = [&](int r0, int rows, int covered) {
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      const int mm = warp + kWarps * i;
      if (mm >= p.m) continue;
      uint64_t* dst = counted + size_t(mm) * p.n + r0 + lane;
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (lane + 32 * e < rows) addCounted(dst + 32 * e, countedContribution(countedSum(mm, e), covered));
    }
  };
  // After the range. The CTAs that share a pair add their sums and leave: waiting at the end of a CTA, for
  // anything, keeps the next call's CTA off its SM (in back-to-back calls, the atomics alone measured
  // 13.0-13.2 us at m = 16 on 4096x14336; every CTA loading its pairs' words after them, 15.6). One CTA per
  // pair waits instead, the one holding its last unit (when it did not hold the whole pair): its first pair,
  // whose last units it ran first. It loads the pair's words until their unit counts are complete, converts
  // them into Y and clears them for the next call. The CTAs it waits for have lower indices, so they were
  // dispatched before it and do not wait for it (nor, finishing pairs of their own, for anything but lower
  // CTAs): the wait ends even when the grid is not resident all at once.
  auto finishCounted = [&] {
    const int P = firstWeightUnit().pair, r0 = P * 128;
    if (u1 <= u0 || u0 == P * p.chunks || u1 < (P + 1) * p.chunks) return;  // not the pair's finisher
    constexpr int kWords = NT * 4;
    static_assert(kWords <= 32, "one bit per word of the thread");
    uint64_t words[NT][4];
    uint32_t missing = 0;
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        words[i][e] = 0;
        if (warp + kWarps * i < p.m && lane + 32 * e < min(128, p.n - r0)) missing |= 1u << (4 * i + e);
      }
    while (missing) {
#pragma unroll
      for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (missing >> (4 * i + e) & 1)
            words[i][e] = loadCounted(counted + size_t(warp + kWarps * i) * p.n + r0 + lane + 32 * e);
#pragma unroll
      for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (decodeCounted(words[i][e]).units == p.chunks) missing &= ~(1u << (4 * i + e));
      if (missing) __nanosleep(64);
    }
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (words[i][e] != 0) {  // (the thread's words; a complete one is never zero)
          const size_t at = size_t(warp + kWarps * i) * p.n + r0 + lane + 32 * e;
          y[at] = A::fromFloat(countedValue(decodeCounted(words[i][e])));
          __stcg(counted + at, 0ull);
        }
  };

  // Y of the listed pairs = their complete sums in the scratch, which is cleared (plus, with a
  // compensator, T U^T of list entry i from uSums(i)). Quad q of the thread is (pair q / NT, batch rows
  // warp + 8 (q % NT)); four quads are in flight per thread, across pairs: a CTA that completes two
  // pairs, the usual case for the last CTA of the call, waits one round trip, not two.
  constexpr int kBatch = 4;  // eight spilled at m > 32
  // With a compensator the T U^T sums of list entry i, [MP][kSumStride], up to kPairsPerRound pairs of
  // them in the stage ring (pairs are finished only after the loop).
  constexpr int kPairsPerRound = 4;  // one U strip per warp
  static_assert(kPairsPerRound * MP * kSumStride <= STAGES * SU4 * 4, "T U^T sums must fit in the ring");
  auto uSums = [&](int i) { return reinterpret_cast<float*>(smem) + i * MP * kSumStride; };
  // The uSums of list entry i (of a round): uSums(i), or where the speculation (below) put them.
  __shared__ int s_list_slot[kPairsPerRound];
  if constexpr (kComp)
    if (tid < kPairsPerRound) s_list_slot[tid] = tid;
  auto quadAt = [&](const int* list, int count, int q, int& r0, int& mm) {  // false: the thread has no quad q
    if (q >= count * NT) return false;  // (list has count entries)
    r0 = list[q / NT] * 128;
    mm = warp + kWarps * (q % NT);
    return mm < p.m && quad_row < min(128, p.n - r0);
  };
  auto loadQuads = [&](const int* list, int count, int q0, float4 (&sums)[kBatch]) {
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      int r0, mm;
      if (quadAt(list, count, q0 + i, r0, mm)) {
        sums[i] = __ldcg(reinterpret_cast<const float4*>(p.partials + size_t(mm) * p.n + r0 + quad_row));
      }
    }
  };
  auto storeQuads = [&](const int* list, int count, int q0, const float4 (&sums)[kBatch]) {
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      int r0, mm;
      if (quadAt(list, count, q0 + i, r0, mm)) {
        float4 v = sums[i];
        if constexpr (kComp) {
          const float* t_u = uSums(s_list_slot[(q0 + i) / NT]);
          const float4 c = *reinterpret_cast<const float4*>(t_u + mm * kSumStride + quad_row);
          v = make_float4(v.x + c.x, v.y + c.y, v.z + c.z, v.w + c.w);
        }
        storeY(mm, r0 + quad_row, v);
        // Cleared here, after the batch's loads: a clearing store right after each (strong) load kept the
        // next quad's load from overlapping it, a round trip per quad (two pairs' finishing at m = 32 took
        // up to 6.4 instead of 2.2 us).
        __stcg(reinterpret_cast<float4*>(p.partials + size_t(mm) * p.n + r0 + quad_row), make_float4(0.f, 0.f, 0.f, 0.f));
      }
    }
  };
  // after_first_loads(): issued once the first batch's loads are, so that its round trip overlaps theirs.
  auto convertPairs = [&](const int* list, int count, int q_first, auto after_first_loads) {
    for (int q0 = q_first; q0 < count * NT; q0 += kBatch) {
      float4 sums[kBatch] = {};
      loadQuads(list, count, q0, sums);
      if (q0 == q_first) after_first_loads();
      storeQuads(list, count, q0, sums);
    }
  };
  auto noHook = [] {};

  // T = X V^T (complete) as B tiles in ttile, one per 64 columns of U, by threads [first, kThreads).
  auto stageT = [&](int first = 0) {
    T* th = reinterpret_cast<T*>(ttile);
    for (int idx = tid - first; idx < p.u_groups * MP * 8; idx += kThreads - first) {
      const int gu = idx / (MP * 8), rem = idx % (MP * 8), mm = rem >> 3, c = rem & 7;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int col = gu * 64 + c * 8 + e;
        const float v = mm < p.m && col < p.rank ? __ldcg(p.tacc + mm * kTCols + col) : 0.f;
        th[((gu * MP + mm) * 8 + (c ^ (mm & 7))) * 8 + e] = A::fromFloat(v);
      }
    }
  };

  // Nobody reads T any more (this CTA read it last): clear what V's flushes wrote, and T's counters, for the
  // next call. 16-byte stores, a row's V columns (v_rows = 64 or 128: 16 or 32 vectors) by shifts: one
  // scalar store and a division per element took the CTA that clears T, often the call's last, ~0.6 us
  // at m = 32 (8 stores per thread).
  auto clearT = [&] {
    const int row_shift = p.v_rows == 128 ? 5 : 4, row_mask = (1 << row_shift) - 1;
    float4* const t4 = reinterpret_cast<float4*>(p.tacc);
    for (int i = tid; i < (p.m << row_shift); i += kThreads)
      __stcg(t4 + (i >> row_shift) * (kTCols / 4) + (i & row_mask), make_float4(0.f, 0.f, 0.f, 0.f));
    if (tid == 0) {
      p.counters[p.pairs] = 0;
      p.counters[p.pairs + 1] = 0;
    }
  };

  // With a compensator: converts the listed pairs to Y, adding T U^T (U decoded like a weight, T as B
  // tiles), after the loop kPairsPerRound pairs at a time, one U strip per warp (pair by pair, a CTA that
  // completed two pairs, often the call's last, took up to 3.7 us; by rounds the calls at m >= 16 on
  // the Mixtral shapes are 1-4 us faster, those at m <= 16 on the DeepSeek shapes ~0.5 us slower). T is
  // staged once. The global loads of a round are issued together so that their round trips overlap: U's
  // first blocks and scales, T, and at m <= 8 and m = 17..32 the first quads of the sums (elsewhere their
  // registers made the kernel spill: 71.5 instead of 63.5 us at m = 64, 48-140 bytes at m = 9..16).
  auto finishPairsWithCompensator = [&](const int* list, int count, bool speculated) {
    constexpr bool kPrefetchSums = NT == 1 || NT == 4;
    constexpr int per_round = kPairsPerRound;
    // T is complete (finishArrived made sure); stageT above.
    int readers_before = 0;  // thread 0: pairs finished (T read) before this CTA's, read after the rounds
    if (speculated) {  // T U^T of every listed pair is in the ring already (speculateCompensator), T read
      // This CTA has read T: its pairs count as finished (the CTA that finishes the last clears T). After
      // the first loads of the sums: issued before them, it held up the thread's loads for its round trip.
      convertPairs(list, count, 0, [&] {
        if (tid == 0) readers_before = atomicAdd(p.counters + p.pairs + 1, count);
      });
      if (tid < count) p.counters[list[tid]] = 0;
    }
    for (int first = 0; first < (speculated ? 0 : count); first += per_round) {
      const int* round = list + first;
      const int in_round = min(per_round, count - first);
      const int entry = warp >> 1, strip = 2 * round[min(entry, in_round - 1)] + (warp & 1);
      const bool u_warp = entry < in_round && strip < p.n / 64;
      uint32_t wd[12];
      uint4 u_scales = make_uint4(0, 0, 0, 0);
      if (u_warp) {
        laneWords(p.uw + size_t(strip) * p.u_groups * kBlockU4, lane, wd);
        u_scales = p.us[size_t(strip) * p.u_groups * kScaleU4 + g];
      }
      float4 sums[kBatch] = {};
      if constexpr (kPrefetchSums) loadQuads(round, in_round, 0, sums);
      if (first == 0) stageT();  // its round trips overlap those of U and the sums
      __syncthreads();           // T staged; the last round's uSums converted
      // This CTA has read T: count its pairs as finished (the CTA that finishes the last clears T). The
      // result is read after the rounds: waiting for it here delayed warp 0's T U^T by a round trip.
      if (first == 0 && tid == 0) readers_before = atomicAdd(p.counters + p.pairs + 1, count);
      if (u_warp) {
        for (int gu = 0; gu < p.u_groups; ++gu) {
          if (gu > 0) {
            laneWords(p.uw + (size_t(strip) * p.u_groups + gu) * kBlockU4, lane, wd);
            u_scales = p.us[(size_t(strip) * p.u_groups + gu) * kScaleU4 + g];
          }
          T2 scale[8], bias[8];
          laneScaleBias<T>(u_scales, nullptr, scale, bias);
          blockProduct<T, NT>(acc, wd, scale, bias, ttile + gu * MP * 8, lane);  // acc is clear here
        }
        // The strip's rows of the entry's sums: one writer each, so stores, not adds.
        float* dst = uSums(entry);
        forEachAccumulator<NT>(acc, lane, [&](int row, int mm, float v) {
          if (mm < p.m) dst[mm * kSumStride + (warp & 1) * 64 + row] = v;
        });
        clearAcc();
      }
      __syncthreads();
      if constexpr (kPrefetchSums) {
        storeQuads(round, in_round, 0, sums);
        convertPairs(round, in_round, kBatch, noHook);
      } else {
        convertPairs(round, in_round, 0, noHook);
      }
      if (tid < in_round) p.counters[round[tid]] = 0;
    }
    if (tid == 0) s_flag = readers_before + count == p.pairs;
    __syncthreads();
    if (s_flag) clearT();  // (finishArrived's barrier follows)
  };

  // Arrival on pair counters. A pair is finished by the CTA whose arrival completes its count; the
  // arrivals of the W pairs are deferred to the end of the CTA's range (or until the list is full), so
  // that the counter round trips do not stall the stream in the middle of the range.
  // With a compensator the pairs' counts do not include T: a CTA finishing pairs (only after its loop)
  // makes sure T is complete, through a load of T's counter made while the arrivals are (T is complete
  // long before in practice: V's units come first).
  constexpr int kTWatcher = kThreads - 1;
  // A pair's count: its units. (A lambda: p.chunks kept in a register across the loop made the m = 33..64
  // variants spill.)
  auto pairCount = [&] { return p.chunks; };
  // Speculative T U^T (with a compensator). The pairs a CTA may complete are those it arrives
  // on, so where it has at most kSpecPairs pending, warps 1-7 stage T and compute T U^T of every pending
  // pair into the ring while warp 0's arrivals (whose acquire holds up that warp's later loads) are in
  // flight; a CTA that completes pairs then only converts them. Otherwise it learnt that after the
  // arrivals' round trip and only then loaded T and U and ran the product (trace, 14336x4096 at m = 32:
  // T staged 1.34 us after the counters, T U^T 0.93 us more). The products of the pairs it does not
  // complete are thrown away, at the end of a range that is over anyway. T may be cleared under a CTA
  // that completes nothing (the last pair was finished meanwhile): it then uses nothing it read. One that
  // completes a pair counts itself a reader of T only after staging it, so T is not cleared under it.
  constexpr int kSpecPairs = 3;  // pending entry e on warps 2e + 2 and 2e + 3 (its two strips)
  auto speculateCompensator = [&](int pending, int t_arrived) {
    if (warp == 0) return;
    const int entry = (warp - 2) >> 1;
    const int strip = warp >= 2 && entry < pending ? 2 * s_pend_pair[entry] + (warp & 1) : -1;
    const bool u_warp = strip >= 0 && strip < p.n / 64;
    uint32_t wd[12];
    uint4 u_scales = make_uint4(0, 0, 0, 0);
    if (u_warp) {  // requested before T's wait, so that the round trips overlap
      laneWords(p.uw + size_t(strip) * p.u_groups * kBlockU4, lane, wd);
      u_scales = p.us[size_t(strip) * p.u_groups * kScaleU4 + g];
    }
    auto warpsOneToSeven = [] { asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads - 32) : "memory"); };
    if (tid == kTWatcher)
      while (t_arrived < p.chunks) t_arrived = loadAcquire(p.counters + p.pairs);
    warpsOneToSeven();  // T is complete (kTWatcher saw it) before warps 1-7 read it
    stageT(32);
    warpsOneToSeven();
    if (u_warp) {
      for (int gu = 0; gu < p.u_groups; ++gu) {
        if (gu > 0) {
          laneWords(p.uw + (size_t(strip) * p.u_groups + gu) * kBlockU4, lane, wd);
          u_scales = p.us[(size_t(strip) * p.u_groups + gu) * kScaleU4 + g];
        }
        T2 scale[8], bias[8];
        laneScaleBias<T>(u_scales, nullptr, scale, bias);
        blockProduct<T, NT>(acc, wd, scale, bias, ttile + gu * MP * 8, lane);  // acc is clear here
      }
      // (The rounds of finishPairsWithCompensator take the same steps: one lambda for both made ptxas spill
      // 24-84 bytes in the compensated kernels at m = 33..64.)
      float* dst = uSums(entry);  // the strip's rows of the entry's sums
      forEachAccumulator<NT>(acc, lane, [&](int row, int mm, float v) {
        if (mm < p.m) dst[mm * kSumStride + (warp & 1) * 64 + row] = v;
      });
      clearAcc();
    }
  };
  auto finishArrived = [&](int t_arrived, bool speculated) {
    __syncthreads();
    const int count = s_count;
    if (count) {  // (the arrivals acquired the pairs' sums: no fence here)
      if constexpr (kComp) {
        if (!speculated) {
          if (tid == kTWatcher)
            while (t_arrived < p.chunks) t_arrived = loadAcquire(p.counters + p.pairs);
          __syncthreads();  // T is complete (kTWatcher saw it) before anyone reads it
        }
        finishPairsWithCompensator(s_list, count, speculated);
      } else {
        convertPairs(s_list, count, 0, noHook);
        if (tid < count) p.counters[s_list[tid]] = 0;  // count <= kMaxPending here
      }
    }
    __syncthreads();
  };
  auto arrivePending = [&] {
    // With a compensator the CTA's last thread (never one making arrivals in practice) reads T's counter;
    // its acquire holds up only its own warp while the arrivals are made.
    int t_arrived = 0;
    if (kComp && tid == kTWatcher) t_arrived = loadAcquire(p.counters + p.pairs);
    if (tid == 0) s_count = 0;
    __syncthreads();  // the CTA's flushes before its arrivals, which release them
    const int pending = s_npending;
    const bool speculate = kComp && pending > 0 && pending <= kSpecPairs;  // warp 0 arrives
    // One thread per arrival (a loop only with a compensator, whose list may be longer than the CTA:
    // the loop cost the variants without one registers).
    for (int i = tid; i < pending; i += kThreads) {
      const int P = s_pend_pair[i], covered = s_pend_cov[i];
      if (atomicAddAcqRel(p.counters + P, covered) + covered == pairCount()) {
        const int at = atomicAdd(&s_count, 1);
        s_list[at] = P;
        if (kComp && speculate) s_list_slot[at] = i;  // its T U^T: uSums(i)
      }
      if (!kComp) break;
    }
    if constexpr (kComp)
      if (speculate) speculateCompensator(pending, t_arrived);
    finishArrived(t_arrived, speculate);  // (with a compensator only after the loop)
    if (tid == 0) s_npending = 0;
  };

  // Sums of one pair (all of this CTA's units of it): straight to Y when the CTA covered the whole pair,
  // else into the scratch with a pending arrival (V pairs: into T, arriving at once on T's counter, which
  // nobody waits for here).
  // kWarpFlush: each thread counts the pending arrivals (thread 0 also in s_npending, which only arrivePending
  // reads, after its barrier), so that a flush needs no barrier.
  [[maybe_unused]] int warp_npending = 0;
  auto flushPair = [&](const Unit& un, int covered) {
    // The four warps of each strip (one k group each) store their sums into tiles of their own, or add
    // them into one tile in turn (plain shared-memory adds: fp32 atomics on shared memory were measured
    // 2-12 us slower per call). Rows of a missing strip are never read.
    const bool strip_ok = 2 * un.pair + (warp >> 2) < strips(un);
    if constexpr (kWarpFlush) {
      if (covered != p.chunks) {
        // Each warp into the scratch on its own: its 64 sums through its own tile (a warp's barrier), a
        // vector atomic per four rows; no CTA barrier, nor the CTA's sum of the four k groups.
        if (strip_ok) {
          warpSumsIntoShared(acc, warp >> 2, warp & 3);
          __syncwarp();
          if (lane < 16) {
            const int row = (warp >> 2) * 64 + 4 * lane;
            const float4 v = *reinterpret_cast<const float4*>(sacc + (warp & 3) * kTileFloats + row);
            addQuad(p.partials + un.pair * 128 + row, v);
          }
        }
        clearAcc();
        if (tid == 0) {
          s_pend_pair[warp_npending] = un.pair;
          s_pend_cov[warp_npending] = covered;
          s_npending = warp_npending + 1;
        }
        if (++warp_npending == kMaxPending) {
          arrivePending();  // (its first barrier orders every warp's atomics before the arrivals)
          warp_npending = 0;
        }
        return;
      }
    }
    const bool v_row_tiles = isV(un) && vRowTiles();  // (false at compile time in the weight's loop)
    auto sumsIntoShared = [&](int tile) {
      if (v_row_tiles) {
        vRowTileSumsIntoShared(acc[0], tile);
      } else if (strip_ok) {
        warpSumsIntoShared(acc, warp >> 2, tile);
      }
    };
    if constexpr (kTiles == 4) {
      sumsIntoShared(warp & 3);
      __syncthreads();
    } else {
#pragma unroll 1
      for (int turn = 0; turn < 4; ++turn) {
        if ((warp & 3) == turn) sumsIntoShared(0);
        __syncthreads();
      }
    }
    clearAcc();
    // Every quad is read (and a single tile cleared) by the same thread. (V's rows past 32 are padding
    // where its row tiles were shared out.)
    const int r0 = un.pair * 128, rows = min(128, (isV(un) ? (v_row_tiles ? 32 : p.v_rows) : p.n) - r0);
    // f(mm, sums of the quad) for the thread's quads
    auto forEachQuad = [&](auto f) {
#pragma unroll
      for (int i = 0; i < NT; ++i) {
        const int mm = warp + kWarps * i;
        if (mm < p.m && quad_row < rows) f(mm, quadOf(mm));
      }
    };
    if (!kComp && covered == p.chunks) {
      forEachQuad([&](int mm, float4 v) { storeY(mm, r0 + quad_row, v); });
      return;
    }
    if constexpr (kCounted) {
      countedIntoScratch(r0, rows, covered);
      return;
    }
    if (isV(un)) {
      forEachQuad([&](int mm, float4 v) { addQuad(p.tacc + mm * kTCols + r0 + quad_row, v); });
      __syncthreads();
      // The CTA's sums before the count (the barrier orders the other threads').
      if (tid == 0) addRelease(p.counters + p.pairs, covered);
      return;
    }
    // Into the scratch with (vector) atomics. (Plain per-CTA slots summed by the finishing CTA were
    // measured slower: its loads became the tail.)
    forEachQuad([&](int mm, float4 v) { addQuad(p.partials + size_t(mm) * p.n + r0 + quad_row, v); });
    if (tid == 0) {
      s_pend_pair[s_npending] = un.pair;
      s_pend_cov[s_npending] = covered;
      ++s_npending;
    }
    __syncthreads();
    if (!kComp && s_npending == kMaxPending) arrivePending();
  };

  // The prologue's units (STAGES - 1 of them, in registers after unrolling), then the producer's cursor.
  // (Requesting only the first unit in the prologue and the rest of the ring once it has arrived got the
  // first unit 1.2 us earlier, but the loop took as much longer: measured no faster, slower at m >= 16.)
  Unit ahead[STAGES - 1];
  ahead[0] = firstUnit();
#pragma unroll
  for (int s = 1; s < STAGES - 1; ++s) ahead[s] = nextUnit(ahead[s - 1], s);
  pipelinePrologue<STAGES>(iters, [&](int s) { loadWeights(ahead[s], s); }, [&](int s) { loadActivations(ahead[s], s); });
  Unit producer = ahead[STAGES - 2];
  // X's rows past m, never copied, zero in every stage (they only reach the sums of batch rows that are
  // dropped, but stay finite that way). After the first copies, which it would delay; the loop's first
  // barrier orders it before any read.
  for (int i = p.m * kXRow + tid; i < MP * kXRow; i += kThreads)
#pragma unroll
    for (int s = 0; s < STAGES; ++s) smem[s * SU4 + kStageWU4 + kStageSU4 + i] = make_uint4(0, 0, 0, 0);
  if constexpr (kComp) {
    // U of the pairs this CTA may finish (those of its first and last units) into L2, one 128-byte line
    // per thread: the finishing, at the end of the call, then waits for L2 rather than HBM. (After the
    // first copies, like the clearing above.) Per strip: lines [0, kBlockLines) its blocks (u_groups *
    // 1536 bytes), then its scales (128 bytes per group).
    constexpr int kBlockLines = 2 * kBlockU4 * 16 / 128;  // rank <= 128: u_groups <= 2
    const int P = (tid < 64 ? u0 : u1 - 1) / p.chunks, strip = 2 * P + ((tid >> 5) & 1), line = tid & 31;
    const bool new_pair = tid < 64 || P != u0 / p.chunks;  // threads 64-127: the last unit's pair, if another
    if (u1 > u0 && tid < 128 && new_pair && strip < p.n / 64) {
      const char* blocks = reinterpret_cast<const char*>(p.uw + size_t(strip) * p.u_groups * kBlockU4);
      const char* scales = reinterpret_cast<const char*>(p.us + size_t(strip) * p.u_groups * kScaleU4);
      if (line * 128 < p.u_groups * kBlockU4 * 16) {
        prefetchL2(blocks + line * 128);
      } else if (line >= kBlockLines && line - kBlockLines < p.u_groups) {
        prefetchL2(scales + (line - kBlockLines) * 128);
      }
    }
  }

  int read_slot = 0, write_slot = STAGES - 1;
  Unit un = ahead[0];
  // One iteration. v_units: whether the CTA's units at this iteration are V's, known at compile time: with
  // a compensator V's iterations come first, in a loop of their own. With the kind known only at run time
  // (one loop) the variants ran short of registers and recomputed the producer's addresses every unit
  // (~180 instead of ~70 instructions per unit at m = 1, m = 17..32 1.4 us slower); m = 9..16 and 33..64
  // kept one loop until two measured faster there too (compensated calls 0.9-1.2 us faster at m = 9..16,
  // 2.3-2.9 us at m = 64, bf16 too although it spills 8-32 bytes at m = 33..64).
  auto iteration = [&](int it, auto v_units) {
    constexpr bool kV = decltype(v_units)::value;
    const Unit cur{un.pair, un.chunk, kV};
    cpAsyncWait<STAGES - 2>();
    __syncthreads();
    if (it + STAGES - 1 < iters) {
      // Past V's iterations the producer is past V's units too (it runs STAGES - 1 units ahead).
      producer = kV ? nextUnit(producer, it + STAGES - 1) : nextWeightUnit(producer);
      loadWeights(producer, write_slot);
      loadActivations(producer, write_slot);
    }
    cpAsyncCommit();
    write_slot = write_slot == STAGES - 1 ? 0 : write_slot + 1;
    const uint4* st = smem + read_slot * SU4;
    read_slot = read_slot == STAGES - 1 ? 0 : read_slot + 1;

    const int strip = 2 * cur.pair + (warp >> 2), grp = 4 * cur.chunk + (warp & 3);
    if (kV && vRowTiles()) {
      // V at rank <= 32: its four blocks' two row tiles that are not padding, one per warp (warp w: row tile
      // w / 4 of block w % 4), where four warps had decoded four row tiles each and four had waited.
      if (grp < p.groups) {
        const uint4* block = st + (warp & 3) * kBlockU4;
        const uint4 v0 = block[lane];
        uint32_t w0 = v0.x, w1 = v0.y, w2 = v0.z;
        if (warp >= 4) {  // row tile 1: words 3..5 of the lane
          const uint4 v1 = block[32 + lane];
          w0 = v0.w;
          w1 = v1.x;
          w2 = v1.y;
        }
        const uint4 scales = st[kStageWU4 + (warp & 3) * kScaleU4 + g];
        rowTileProductSymmetric<T, NT, kXRow>(acc[0], w0, w1, w2, warp >= 4 ? scales.y : scales.x,
                                              st + kStageWU4 + kStageSU4 + (warp & 3) * kXGroupU4, lane);
      }
    } else if (strip < strips(cur) && grp < p.groups) {
      uint32_t wd[12];
      laneWords(st + warp * kBlockU4, lane, wd);
      const uint4* sx = st + kStageWU4 + kStageSU4 + (warp & 3) * kXGroupU4;
      // bias_vector == nullptr: symmetric groups (V, or the symmetric variant).
      auto product = [&](const uint4* bias_vector) {
        if constexpr (kGroupScaled) {
          blockProductGroupScaled<T, NT, kXRow>(acc, wd, st[kStageWU4 + warp * kScaleU4 + g], bias_vector, sx, lane, !kOneRow);
        } else if constexpr (NT == 4) {  // m = 17..32: fewer live registers measured 1.6 us faster at m = 32
          // (and slower at m = 9..16 and 33..64, where the registers were not short or it spilled)
          blockProductPacked<T, NT, kXRow>(acc, wd, st[kStageWU4 + warp * kScaleU4 + g], bias_vector, sx, lane);
        } else {
          T2 scale[8], bias[8];
          laneScaleBias<T>(st[kStageWU4 + warp * kScaleU4 + g], bias_vector, scale, bias);
          blockProduct<T, NT, kXRow>(acc, wd, scale, bias, sx, lane);
        }
      };
      // The kind of groups is known per unit: a choice per group inside the decoder computed both biases
      // (the staged one and -4 s), 9 more instructions per block (the compiler cannot see that a staged
      // address is not null).
      if (isV(cur) || !kAsym) {
        product(nullptr);
      } else {
        // The biases were staged after the 64 scale vectors.
        const uint4* bias_vector = st + kStageWU4 + 64 + warp * kScaleU4 + g;
        __builtin_assume(bias_vector != nullptr);
        product(bias_vector);
      }
    }
    const Unit next = kV ? nextUnit(cur, it + 1) : nextWeightUnit(cur);
    if (it == iters - 1 || isV(next) != isV(cur) || next.pair != cur.pair) {
      const int covered = isV(cur) ? nv : min(u1, (cur.pair + 1) * p.chunks) - max(u0, cur.pair * p.chunks);
      flushPair(cur, covered);
    }
    un = next;
  };
  int it = 0;
  if constexpr (kComp)
    for (; it < nv; ++it) iteration(it, std::true_type{});
  for (; it < iters; ++it) iteration(it, std::false_type{});
  cpAsyncWait<0>();
  if constexpr (kCounted) {
    finishCounted();
  } else {
    arrivePending();
  }
}

struct Limits {
  int sms = 132, optin = 0;
};
Limits limits() {
  static std::once_flag once;
  static Limits lim;
  std::call_once(once, [] {
    int dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) {
      cudaDeviceGetAttribute(&lim.sms, cudaDevAttrMultiProcessorCount, dev);
      cudaDeviceGetAttribute(&lim.optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    }
  });
  return lim;
}

int tilesFor(int64_t m) { return m <= 8 ? 1 : (m <= 16 ? 2 : (m <= 32 ? 4 : 8)); }
// comp: T's B tiles and the lists of pending arrivals and pairs to finish (pend_cap entries each).
int smemBytes(int nt, bool comp, int pend_cap) {
  const int lists = comp ? 4 * (2 * pend_cap + std::max(pend_cap, kThreads)) : 0;
  return stagesFor(nt) * stageU4(nt) * 16 + sumTiles(nt) * nt * 8 * kSumStride * 4 + (comp ? 2 * nt * 64 * 16 : 0) + lists;
}
int unitsFor(int64_t n, int64_t k) { return int((n / 64 + 1) / 2) * int((k / 64 + 3) / 4); }

template <typename T, int NT, bool kAsym, bool kComp, bool kOneRow, bool kWarpFlush = false, bool kCounted = false>
Status launchTyped(const Params& p, int grid, bool overlap, cudaStream_t stream) {
  auto kernel = w3a16StreamKKernel<T, NT, kAsym, kComp, kOneRow, kWarpFlush, kCounted>;
  const int smem = smemBytes(NT, kComp, p.pend_cap);
  static std::once_flag once;
  static cudaError_t attr_err = cudaSuccess;
  // With a compensator the size depends on the shape: allow, once, all that the device leaves beside the
  // kernel's static shared memory.
  std::call_once(once, [&] {
    int allowed = smem;
    cudaFuncAttributes attrs{};
    if (kComp && limits().optin > 0 && cudaFuncGetAttributes(&attrs, kernel) == cudaSuccess)
      allowed = std::max(smem, limits().optin - int(attrs.sharedSizeBytes));
    attr_err = allowSharedMemory(kernel, allowed);
  });
  MOEWB_CUDA_TRY(attr_err);
  return launchKernel(kernel, p, grid, kThreads, smem, overlap, stream);
}

template <typename T, int NT, bool kOneRow = false>
Status launchVariant(const Params& p, bool asym, bool comp, bool counted, int grid, bool overlap, cudaStream_t st) {
  if constexpr (std::is_same_v<T, half> && NT <= 2) {  // (countedSumsApply: m <= 16)
    if (counted)
      return asym ? launchTyped<T, NT, true, false, kOneRow, false, true>(p, grid, overlap, st)
                  : launchTyped<T, NT, false, false, kOneRow, false, true>(p, grid, overlap, st);
  }
  // fp16 at m = 1 where the CTAs hold three units or more (flush_cost > 0): warps flush on their own. The
  // last flush took 0.45 instead of 0.64 us (median; four times the atomics make the arrivals a little
  // longer): 4096x14336 0.1 us faster (11.01-11.06 against 11.10-11.21 us), 14336x4096 0.15 us. Slower with
  // one unit per CTA (the DeepSeek shapes, 0.05-0.15 us) and in bf16 (0.1 us); with the choice made inside
  // the kernel, its registers took the gain away.
  if constexpr (kOneRow && std::is_same_v<T, half>) {
    if (!comp && p.flush_cost > 0)
      return asym ? launchTyped<T, NT, true, false, true, true>(p, grid, overlap, st)
                  : launchTyped<T, NT, false, false, true, true>(p, grid, overlap, st);
  }
  if (asym)
    return comp ? launchTyped<T, NT, true, true, kOneRow>(p, grid, overlap, st)
                : launchTyped<T, NT, true, false, kOneRow>(p, grid, overlap, st);
  return comp ? launchTyped<T, NT, false, true, kOneRow>(p, grid, overlap, st)
              : launchTyped<T, NT, false, false, kOneRow>(p, grid, overlap, st);
}
template <typename T>
Status launchTiles(const Params& p, bool asym, bool comp, bool counted, int grid, bool overlap, cudaStream_t st) {
  switch (tilesFor(p.m)) {
    case 1:
      return p.m == 1 ? launchVariant<T, 1, true>(p, asym, comp, counted, grid, overlap, st)
                      : launchVariant<T, 1>(p, asym, comp, counted, grid, overlap, st);
    case 2: return launchVariant<T, 2>(p, asym, comp, counted, grid, overlap, st);
    case 4: return launchVariant<T, 4>(p, asym, comp, counted, grid, overlap, st);
    default: return launchVariant<T, 8>(p, asym, comp, counted, grid, overlap, st);
  }
}

constexpr int64_t alignUp(int64_t v) { return (v + 255) / 256 * 256; }

// The CTAs' ranges of a split (Params::starts: grid + 1 entries) and the most CTAs that share a pair,
// cached per host thread for the last few splits: computing them took ~0.8 us of host time per launch.
struct RangeTable {
  const int2* starts;
  int most_sharing;  // CTAs whose ranges meet one pair, at most
};
RangeTable rangeTable(const StreamKSplit& s) {
  struct Entry {
    StreamKSplit key;
    bool used = false;
    std::array<int2, kStartTable> starts;
    int most_sharing = 0;
  };
  auto same = [](const StreamKSplit& a, const StreamKSplit& b) {
    return a.units == b.units && a.chunks == b.chunks && a.pairs == b.pairs && a.grid == b.grid &&
           a.flush_cost == b.flush_cost && a.compensator == b.compensator && a.first_extra == b.first_extra &&
           a.v_unit_cost == b.v_unit_cost;
  };
  thread_local std::array<Entry, 8> cache;
  thread_local int next = 0;
  for (const Entry& e : cache)
    if (e.used && same(e.key, s)) return {e.starts.data(), e.most_sharing};
  Entry& e = cache[size_t(next)];
  next = (next + 1) % int(cache.size());
  e.key = s;
  e.used = true;
  for (int c = 0; c <= s.grid; ++c) {
    const int u = streamKWeightStart(s, c);
    e.starts[size_t(c)] = make_int2(u, u / s.chunks);
  }
  // The ranges are contiguous and in order: the CTAs meeting pair P are those from the one holding its first
  // unit to the one holding its last (empty ranges hold none).
  e.most_sharing = 0;
  for (int c = 0, sharing = 0, pair = -1; c < s.grid; ++c) {
    const int u0 = e.starts[size_t(c)].x, u1 = e.starts[size_t(c) + 1].x;
    if (u1 <= u0) continue;
    const int first = u0 / s.chunks, last = (u1 - 1) / s.chunks;
    sharing = first == pair ? sharing + 1 : 1;
    e.most_sharing = std::max(e.most_sharing, sharing);
    if (last != first) sharing = 1;
    pair = last;
  }
  return {e.starts.data(), e.most_sharing};
}

// Counted sums across CTAs (w3a16_counted_sum.h) where they are possible and measured faster (H100, against the
// fp32 sums and arrival counters; the measurements are in the git log of this file).
//  * Possible: fp16 without a compensator, the ranges tabulated (the kernel reads a CTA's first pair from
//    the table), a pair of at most 255 units shared by at most 31 CTAs.
//  * Faster at m <= 8 (0.9-1.2 us at m = 2..8 on the Mixtral shapes; 0.2-0.6 us at m = 1..4 on the DeepSeek
//    shapes), and at m = 9..16 where the CTAs hold three units or more (0.05-0.15 us on the Mixtral shapes;
//    on 2048x1408, one unit per CTA, 0.3 us slower). At m > 16 (64-bit atomics for 32 or 64 batch rows)
//    they were 1.2-3 us slower.
bool countedSumsApply(const Params& p, bool bf16, bool comp, int grid, int most_sharing) {
  const bool possible = !bf16 && !comp && grid < kStartTable && p.chunks <= kCountedMaxUnits &&
                        most_sharing <= kCountedMaxContributors;
  const bool faster = p.m <= 8 || (p.m <= 16 && p.flush_cost > 0);
  return possible && faster;
}

}  // namespace

// The pairs' sums: [kMaxM][n] fp32, or as counted words [kMaxM][n] 64-bit.
int64_t partialsBytes(int64_t n) { return alignUp(n * kMaxM * 8); }

int64_t streamKWorkspaceBytes(int64_t n) {
  const int64_t pairs = (n / 64 + 1) / 2;
  return partialsBytes(n) + alignUp(int64_t(kMaxM) * kTCols * 4) + alignUp((pairs + 2) * 4);
}

int streamKCtas(int64_t m, int64_t n, int64_t k, int requested) {
  return requested > 0 ? std::min<int64_t>(requested, unitsFor(n, k)) : streamKGrid(m, n, k);
}

int streamKGrid(int64_t m, int64_t n, int64_t k) {
  // The same with a compensator. (Its grid used to be cut to about three units per CTA so that T was
  // complete before any pair, a rule from the scheme in which T's last CTA finished the early pairs one
  // after the other. Every CTA that completes a pair now waits for T itself, and the cut only made the small
  // shapes slower: 2048x1408 at m = 1 6.0 us on 34 CTAs, 5.0 on 96; 512x256 8.9 us on one CTA, 4.7 on
  // four, on the H100.)
  return std::max(1, std::min(limits().sms * ctasPerSm(tilesFor(m)), unitsFor(n, k)));
}

Status launchW3A16StreamK(const StreamKArgs& a, cudaStream_t stream) {
  const bool comp = a.rank > 0;
  if (comp && (a.rank > kTCols || !a.vw || !a.vs || !a.uw || !a.us))
    return Status::failure(-1, "w3a16Gemm: the INT3 compensator needs U and V in the kernel layout and rank <= 128");
  Params p{};
  p.x = a.x;
  p.y = a.y;
  p.w = static_cast<const uint4*>(a.w);
  p.s = static_cast<const uint4*>(a.s);
  p.b = static_cast<const uint4*>(a.b);
  p.vw = static_cast<const uint4*>(a.vw);
  p.vs = static_cast<const uint4*>(a.vs);
  p.uw = static_cast<const uint4*>(a.uw);
  p.us = static_cast<const uint4*>(a.us);
  p.m = a.m;
  p.n = a.n;
  p.k = a.k;
  p.rank = a.rank;
  p.v_rows = comp ? (a.rank <= 64 ? 64 : 128) : 0;
  p.u_groups = comp ? (a.rank + 63) / 64 : 0;
  p.groups = a.k / 64;
  p.chunks = (p.groups + 3) / 4;
  p.pairs = (a.n / 64 + 1) / 2;
  p.units = p.pairs * p.chunks;  // the weight's units; V's are shared out separately
  char* base = static_cast<char*>(a.workspace);
  p.partials = reinterpret_cast<float*>(base);
  base += partialsBytes(a.n);
  p.tacc = reinterpret_cast<float*>(base);
  base += alignUp(int64_t(kMaxM) * kTCols * 4);
  p.counters = reinterpret_cast<int*>(base);
  const int grid = streamKCtas(a.m, a.n, a.k, a.grid);
  p.flush_cost = streamKFlushCost(p.units, grid);
  const StreamKSplit split =
      streamKSplitFor(p.units, p.chunks, p.pairs, grid, p.flush_cost, comp, vRowTilesFor(tilesFor(a.m), a.rank),
                      iterationsFirstFor(tilesFor(a.m)));
  p.pend_cap = comp ? streamKMaxIterations(split) : 0;
  p.starts[0].x = -1;
  int most_sharing = grid;
  if (grid < kStartTable) {
    const RangeTable ranges = rangeTable(split);
    std::copy_n(ranges.starts, grid + 1, p.starts);
    most_sharing = ranges.most_sharing;
  }
  const bool counted = countedSumsApply(p, a.bf16, comp, grid, most_sharing);
  const int smem = smemBytes(tilesFor(a.m), comp, p.pend_cap);
  if (limits().optin > 0 && smem > limits().optin)
    return Status::failure(-1, "w3a16Gemm: the stream-K kernel needs " + std::to_string(smem) +
                                   " bytes of shared memory per block; this device allows " + std::to_string(limits().optin));
  const bool asym = a.b != nullptr;
  return a.bf16 ? launchTiles<__nv_bfloat16>(p, asym, comp, false, grid, a.overlap, stream)
                : launchTiles<half>(p, asym, comp, counted, grid, a.overlap, stream);
}

}  // namespace moewb::gpu::detail

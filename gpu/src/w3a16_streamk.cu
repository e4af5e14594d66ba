// SPDX-License-Identifier: MIT
// Stream-K W3A16 kernel: Y[m, n] = X[m, k] * dequant(W)[n, k]^T (+ (X V^T) U^T with INT3 U, V) for fp16 or
// bf16 activations, m = 1..64. Design notes and measurements: docs/w3a16-kernel.md ("stream-K kernel").
//
// Why this shape. At small batch the product is a stream of 3-bit weights, and a microbenchmark on the H100
// (25.7 MB per call, graph of back-to-back calls) showed what streams best: one wave of long-lived CTAs
// (two 256-thread CTAs per SM), each reading one contiguous range through a cp.async ring of ~12 KB stages,
// with programmatic dependent launch: 8.7 us, against 12.9-14.7 us for the loads alone of the split-k
// kernel's grid (528 short CTAs of 7 groups each). With the decoder and the mma the kernel is bound by
// both: the timeline of one call (moewb_streamk_trace) shows ~7 units per CTA, each ~1.3 us of issue-bound
// work, after the first stage arrives, and with every stage of every CTA requested at once the first one
// arrives only when most of them have (5.4 us with a ring of 5, 3.2 us with 3): so the ring is 3 deep at
// m <= 8 (-1.4 us per call), and the decoder applies scale and zero once per group after the mma
// (blockProductGroupScaled). docs/w3a16-kernel.md has the measurements.
//
//  * Work unit = 2 strips (128 rows) x 4 groups (256 of k): 8 blocks of 64x64, one per warp; warp w takes
//    strip 2P + w/4, group 4c + w%4. Per strip the 4 blocks are adjacent in the kernel layout, so a unit
//    is two contiguous 6 KB runs. Units are ordered pair-major; CTA i takes the contiguous range
//    [U*i/grid, U*(i+1)/grid) (stream-K: ranges cross pair boundaries).
//  * A stage holds the unit's 8 blocks, their scales (and biases) and X of the 4 groups (swizzled for
//    ldmatrix). The decoder and mma.sync math are in w3a16_device.cuh: blockProductGroupScaled at m <= 8,
//    the split-k kernel's blockProduct above that.
//  * When the unit's pair changes (or the range ends) the CTA reduces its 8 warps' fp32 accumulators in
//    shared memory and flushes: a pair it covered entirely is written straight to Y; otherwise the sums go
//    to the fp32 scratch with (vector) atomics, and at the end of its range the CTA adds its unit counts
//    to the pairs' counters; the CTA that completes a count converts the pair to Y and clears the scratch.
//  * Compensator (INT3 U and V, MiLo's storage): V, padded to 64 or 128 rows, is streamed as one more
//    pair placed first in the unit order, its sums going to an fp32 T = X V^T. Its completion adds one
//    arrival to every pair's counter (target units + 1), so whichever CTA completes a pair also has the
//    whole T and adds T U^T (U decoded like a weight: n rows x rank columns) before converting. Nothing
//    waits on another CTA, so the scheme cannot deadlock; U is read once per call.
#include "w3a16_streamk.h"

#include <algorithm>
#include <mutex>

#include "cuda_check.h"
#include "kernel_launch.h"
#include "w3a16_device.cuh"

namespace moewb::gpu::detail {
namespace {

using namespace w3a16dev;

#ifndef STREAMK_TRACE
#define STREAMK_TRACE(point)  // timestamps of gpu/tools/moewb_streamk_trace.cu: 0 start, 1 T = X V^T complete,
#endif                        // 4 + it barrier of iteration it, 2 loop end, 3 end; nothing in the library build

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxM = 64;
constexpr int kTCols = 128;                       // T = X V^T scratch: [kMaxM][kTCols] fp32
constexpr int kMaxPending = 16;                   // deferred pair arrivals per CTA
constexpr int kStageWU4 = kWarps * kBlockU4;      // 768 vectors of weights per stage
constexpr int kStageSU4 = kWarps * 2 * kScaleU4;  // 128 vectors of scales and biases
__host__ __device__ constexpr int stageU4(int nt) { return kStageWU4 + kStageSU4 + 4 * nt * 64; }
// Ring depth. Deeper rings stream better alone but delay every CTA's first stage (all are requested at
// once): at m <= 8, 3 stages measured 1.4 us faster per call than 5 and 0.3 us faster than 2; at m = 16,
// 3 and 4 measured the same.
__host__ __device__ constexpr int stagesFor(int nt) { return nt == 1 ? 3 : (nt == 2 ? 4 : 3); }
// Two CTAs per SM cap a thread at 128 registers: enough up to m = 16; at m = 17..32 the accumulators
// spilled (one CTA per SM measured 50 instead of 64 us at m = 32, 66 instead of 125 us with a compensator).
__host__ __device__ constexpr int ctasPerSm(int nt) { return nt <= 2 ? 2 : 1; }

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
  float* partials;  // [n][kMaxM] fp32 sums of the pairs that several CTAs share, zero between calls
  float* tacc;      // [kMaxM][kTCols]
  int* counters;    // [0, pairs): units arrived per pair; [pairs]: V's units (T); [pairs + 1]: pairs finished
  int m, n, k, rank, v_rows, u_groups;
  int groups, chunks, pairs, units;  // chunks = units per pair, units = pairs * chunks (V's not counted)
};

// Release/acquire at GPU scope is all the counter protocol needs (the writer's sums before its arrival,
// the finisher's reads after it); __threadfence() is a sequentially consistent fence.
__device__ __forceinline__ void fenceAcqRel() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }

__host__ __device__ inline int rangeStart(int units, int i, int grid) { return int(int64_t(units) * i / grid); }

template <typename T, int NT, bool kAsym, bool kComp>
__global__ void __launch_bounds__(kThreads, ctasPerSm(NT)) w3a16StreamKKernel(const Params p) {
  using A = Act<T>;
  using T2 = typename A::T2;
  constexpr int STAGES = stagesFor(NT), MP = NT * 8, SU4 = stageU4(NT);
  // Scale and zero per group after the mma (fewer instructions per block) at m <= 8: at m = 16 its extra
  // registers spill with a compensator, and without one it measured 2 us slower (29.5 vs 27.6 us).
  constexpr bool kGroupScaled = NT == 1;
  extern __shared__ uint4 smem[];
  float* sacc = reinterpret_cast<float*>(smem + STAGES * SU4);  // [128 rows][MP] CTA sums of one pair
  uint4* ttile = smem + STAGES * SU4 + 128 * MP / 4;            // compensator: T as B tiles
  __shared__ int s_flag, s_count, s_npending;
  __shared__ int s_list[kThreads];
  __shared__ int s_pend_pair[kMaxPending], s_pend_cov[kMaxPending];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4;
  // The CTA's iterations: first its share of V's units (compensator: chunks blockIdx.x + j*grid, so that
  // T = X V^T is complete after about one unit's time), then a contiguous range [u0, u1) of the weight's
  // units. V's units count in the balance: CTA b's share of all (pairs + 1) * chunks units is its V units
  // plus its weight range.
  const int b = int(blockIdx.x), G = int(gridDim.x);
  const int nv = kComp && p.chunks > b ? (p.chunks - b + G - 1) / G : 0;
  auto vBefore = [&](int c) { return kComp ? (p.chunks / G) * c + min(c, p.chunks % G) : 0; };
  const int all_units = p.units + (kComp ? p.chunks : 0);
  const int u0 = rangeStart(all_units, b, G) - vBefore(b), u1 = rangeStart(all_units, b + 1, G) - vBefore(b + 1);
  const int iters = nv + u1 - u0;
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  const uint64_t evict_first = evictFirstPolicy();
  STREAMK_TRACE(0);

  struct Unit {
    int pair, chunk;  // pair index within its matrix, group chunk
    bool v;           // a unit of the compensator's V
  };
  // The unit's first 64x64 block (strip 2 pair, group 4 chunk); recomputed where used, which costs fewer
  // registers than carrying it (the compensator's variants spill otherwise).
  auto block0 = [&](const Unit& un) { return (2 * un.pair) * p.groups + 4 * un.chunk; };
  auto strips = [&](const Unit& un) { return un.v ? p.v_rows / 64 : p.n / 64; };  // of the unit's matrix
  // The CTA's units are walked in order, one step at a time: a division per unit (u / chunks) cost more
  // issue slots than the decoder of a block at m = 1, and the producer, the consumer and the flush test
  // each needed one. The first weight unit is recomputed (one division) rather than kept in registers,
  // which the compensator's variants lack.
  auto firstWeightUnit = [&] { return Unit{u0 / p.chunks, u0 % p.chunks, false}; };
  auto firstUnit = [&] { return nv > 0 ? Unit{0, b, true} : firstWeightUnit(); };
  auto nextUnit = [&](Unit un, int next_it) {  // the unit of iteration next_it, given that of next_it - 1
    if (next_it < nv) {
      un.chunk += G;
      return un;
    }
    if (next_it == nv) return firstWeightUnit();
    if (++un.chunk == p.chunks) {
      un.chunk = 0;
      ++un.pair;
    }
    return un;
  };

  // Fixed per-thread offsets into a unit's weights and scales; a unit adds its base. Vector
  // idx = tid + 256j of a stage belongs to warp block wb = idx / 96 (strip offset wb / 4, group offset wb % 4).
  auto wBlock = [&](int j) { return (tid + kThreads * j) / kBlockU4; };
  int w_off[3];
#pragma unroll
  for (int j = 0; j < 3; ++j)
    w_off[j] = ((wBlock(j) >> 2) * p.groups + (wBlock(j) & 3)) * kBlockU4 + (tid + kThreads * j) % kBlockU4;
  const int s_wb = (tid & 63) >> 3;
  const int s_off = ((s_wb >> 2) * p.groups + (s_wb & 3)) * kScaleU4 + (tid & 7);

  auto loadWeights = [&](const Unit& un, int slot) {
    uint4* st = smem + slot * SU4;
    const uint4* wsrc = (un.v ? p.vw : p.w) + size_t(block0(un)) * kBlockU4;
    const int strips_left = strips(un) - 2 * un.pair, groups_left = p.groups - 4 * un.chunk;
    const bool scale_thread = tid < 64 || (kAsym && !un.v && tid < 128);
    const uint4* ssrc = (tid < 64 ? (un.v ? p.vs : p.s) : p.b) + size_t(block0(un)) * kScaleU4 + s_off;
#pragma unroll
    for (int j = 0; j < 3; ++j)
      if ((wBlock(j) >> 2) < strips_left && (wBlock(j) & 3) < groups_left)
        cpAsync16Stream(st + tid + kThreads * j, wsrc + w_off[j], evict_first);
    if (scale_thread && (s_wb >> 2) < strips_left && (s_wb & 3) < groups_left) cpAsync16(st + kStageWU4 + tid, ssrc, true);
  };
  auto loadActivations = [&](const Unit& un, int slot) {
    uint4* sx = smem + slot * SU4 + kStageWU4 + kStageSU4;
    const int groups_left = p.groups - 4 * un.chunk;
    const T* xsrc = x + size_t(un.chunk) * 256;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int idx = tid + kThreads * j;
      const int xg = idx / (NT * 64), rem = idx % (NT * 64), mm = rem >> 3, c = rem & 7;
      const bool valid = mm < p.m && xg < groups_left;
      cpAsync16(sx + xg * NT * 64 + mm * 8 + (c ^ (mm & 7)), valid ? xsrc + size_t(mm) * p.k + xg * 64 + c * 8 : x, valid);
    }
  };

  float acc[4][NT][4];
  auto clearAcc = [&] { clearAccumulators<NT>(acc); };
  clearAcc();
  for (int i = tid; i < 128 * MP; i += kThreads) sacc[i] = 0.f;
  if (tid == 0) s_npending = 0;

  // Adds the warp's accumulators (rows of its strip, strip-local row = 64 * strip_local + ...) into sacc.
  // No other warp may write the same rows at the same time.
  auto accumulateIntoShared = [&](const float (&a)[4][NT][4], int strip_local) {
    forEachAccumulator<NT>(a, lane, [&](int row, int mm, float v) {
      if (mm < p.m) sacc[(strip_local * 64 + row) * MP + mm] += v;
    });
  };

  // Converts pair P (its complete sums in the scratch) to Y, adding T U^T when there is a compensator.
  auto finishPair = [&](int P) {
    const int r0 = P * 128, rows = min(128, p.n - r0);
    // Eight independent loads per thread in flight (one at a time cost a round trip each).
    for (int base = tid; base < rows * p.m; base += 8 * kThreads) {
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int idx = base + j * kThreads;
        v[j] = idx < rows * p.m ? __ldcg(p.partials + size_t(r0 + idx / p.m) * kMaxM + idx % p.m) : 0.f;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int idx = base + j * kThreads;
        if (idx < rows * p.m) {
          sacc[(idx / p.m) * MP + idx % p.m] = v[j];
          __stcg(p.partials + size_t(r0 + idx / p.m) * kMaxM + idx % p.m, 0.f);
        }
      }
    }
    if constexpr (kComp) {
      // T (complete: the pair's counter included T's arrival) as B tiles, one per 64 columns of U.
      T* th = reinterpret_cast<T*>(ttile);
      for (int idx = tid; idx < p.u_groups * MP * 8; idx += kThreads) {
        const int gu = idx / (MP * 8), rem = idx % (MP * 8), mm = rem >> 3, c = rem & 7;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const int col = gu * 64 + c * 8 + e;
          const float v = mm < p.m && col < p.rank ? __ldcg(p.tacc + mm * kTCols + col) : 0.f;
          th[((gu * MP + mm) * 8 + (c ^ (mm & 7))) * 8 + e] = A::fromFloat(v);
        }
      }
      __syncthreads();
      const int strip = 2 * P + warp;
      if (warp < 2 && strip < p.n / 64) {
        for (int gu = 0; gu < p.u_groups; ++gu) {
          uint32_t wd[12];
          laneWords(p.uw + (size_t(strip) * p.u_groups + gu) * kBlockU4, lane, wd);
          T2 scale[8], bias[8];
          laneScaleBias<T>(p.us[(size_t(strip) * p.u_groups + gu) * kScaleU4 + g], nullptr, scale, bias);
          blockProduct<T, NT>(acc, wd, scale, bias, ttile + gu * MP * 8, lane);  // acc is clear here
        }
        accumulateIntoShared(acc, warp);  // rows of one warp only: no other writer
        clearAcc();
      }
    }
    __syncthreads();
    // Every sum is read and cleared by the same thread (sacc is zero outside the rows x m block).
    for (int idx = tid; idx < rows * p.m; idx += kThreads) {
      const int rl = idx % rows, mm = idx / rows;
      y[size_t(mm) * p.n + r0 + rl] = A::fromFloat(sacc[rl * MP + mm]);
      sacc[rl * MP + mm] = 0.f;
    }
    if (tid == 0) {
      p.counters[P] = 0;
      s_flag = 0;
      if (kComp && atomicAdd(p.counters + p.pairs + 1, 1) == p.pairs - 1) s_flag = 1;  // last pair of the call
    }
    __syncthreads();
    if (kComp && s_flag) {  // nobody reads T any more: clear it and the T counters for the next call
      for (int i = tid; i < kMaxM * kTCols; i += kThreads) __stcg(p.tacc + i, 0.f);
      if (tid == 0) {
        p.counters[p.pairs] = 0;
        p.counters[p.pairs + 1] = 0;
      }
      __syncthreads();
    }
  };

  // Arrival on pair counters. A pair is finished by the CTA whose arrival completes its count; the
  // arrivals of the W pairs are deferred to the end of the CTA's range (or until the list is full), so
  // that the fence and the counter round trips do not stall the stream in the middle of the range.
  auto finishArrived = [&] {
    __syncthreads();
    const int count = s_count;
    if (count) fenceAcqRel();
    for (int i = 0; i < count; ++i) finishPair(s_list[i]);
    __syncthreads();
  };
  auto arrivePending = [&] {
    fenceAcqRel();
    if (tid == 0) s_count = 0;
    __syncthreads();
    const int pending = s_npending;
    if (tid < pending) {
      const int P = s_pend_pair[tid], covered = s_pend_cov[tid];
      const int target = p.chunks + (kComp ? 1 : 0);
      if (atomicAdd(p.counters + P, covered) + covered == target) s_list[atomicAdd(&s_count, 1)] = P;
    }
    finishArrived();
    if (tid == 0) s_npending = 0;
  };
  // T = X V^T is complete: one arrival on every pair (its target counts it); pairs whose units were all
  // done already finish here.
  auto arriveT = [&] {
    STREAMK_TRACE(1);
    for (int base = 0; base < p.pairs; base += kThreads) {
      if (tid == 0) s_count = 0;
      __syncthreads();
      const int P = base + tid;
      if (P < p.pairs && atomicAdd(p.counters + P, 1) + 1 == p.chunks + 1) s_list[atomicAdd(&s_count, 1)] = P;
      finishArrived();
    }
  };

  // Sums of one pair (all of this CTA's units of it): straight to Y when the CTA covered the whole pair,
  // else into the scratch with a pending arrival (V pairs: into T, arriving at once so that T completes
  // early in the call).
  auto flushPair = [&](const Unit& un, int covered) {
    // The four warps of each strip add their sums in turn (plain shared-memory adds: fp32 atomics on
    // shared memory were measured 2-12 us slower per call).
    const bool strip_ok = 2 * un.pair + (warp >> 2) < strips(un);
#pragma unroll 1
    for (int turn = 0; turn < 4; ++turn) {
      if (strip_ok && (warp & 3) == turn) accumulateIntoShared(acc, warp >> 2);
      __syncthreads();
    }
    clearAcc();
    // Every sum is read and cleared by the same thread (sacc is zero outside the rows x m block).
    const int r0 = un.pair * 128, rows = min(128, (un.v ? p.v_rows : p.n) - r0);
    if (!kComp && covered == p.chunks) {
      for (int idx = tid; idx < rows * p.m; idx += kThreads) {
        const int rl = idx % rows, mm = idx / rows;
        y[size_t(mm) * p.n + r0 + rl] = A::fromFloat(sacc[rl * MP + mm]);
        sacc[rl * MP + mm] = 0.f;
      }
      return;
    }
    if (un.v) {
      for (int idx = tid; idx < rows * p.m; idx += kThreads) {
        const int rl = idx % rows, mm = idx / rows;
        atomicAdd(p.tacc + mm * kTCols + rl, sacc[rl * MP + mm]);
        sacc[rl * MP + mm] = 0.f;
      }
      fenceAcqRel();
      if (tid == 0) s_count = 0;
      __syncthreads();
      if (tid == 0 && atomicAdd(p.counters + p.pairs, covered) + covered == p.chunks) s_count = 1;
      __syncthreads();
      const bool t_complete = s_count;
      __syncthreads();  // everyone has read s_count before arriveT resets it
      if (t_complete) {
        fenceAcqRel();
        arriveT();
      }
      return;
    }
    // Into the scratch with vector atomics along the batch where 4 columns are there (sm_90). (Plain
    // per-CTA slots summed by the finishing CTA were measured slower: its loads became the tail.)
    const int m4 = (p.m + 3) / 4;
    for (int idx = tid; idx < rows * m4; idx += kThreads) {
      const int rl = idx / m4, mm = (idx % m4) * 4;
      float* dst = p.partials + size_t(r0 + rl) * kMaxM + mm;
      float* src = sacc + rl * MP + mm;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (mm + 4 <= p.m) {
        atomicAdd(reinterpret_cast<float4*>(dst), make_float4(src[0], src[1], src[2], src[3]));
        src[0] = src[1] = src[2] = src[3] = 0.f;
        continue;
      }
#endif
      for (int e = 0; e < 4 && mm + e < p.m; ++e) {
        atomicAdd(dst + e, src[e]);
        src[e] = 0.f;
      }
    }
    if (tid == 0) {
      s_pend_pair[s_npending] = un.pair;
      s_pend_cov[s_npending] = covered;
      ++s_npending;
    }
    __syncthreads();
    if (s_npending == kMaxPending) arrivePending();
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

  int read_slot = 0, write_slot = STAGES - 1;
  Unit un = ahead[0];
  for (int it = 0; it < iters; ++it) {
    cpAsyncWait<STAGES - 2>();
    __syncthreads();
    STREAMK_TRACE(4 + it);
    if (it + STAGES - 1 < iters) {
      producer = nextUnit(producer, it + STAGES - 1);
      loadWeights(producer, write_slot);
      loadActivations(producer, write_slot);
    }
    cpAsyncCommit();
    write_slot = write_slot == STAGES - 1 ? 0 : write_slot + 1;
    const uint4* st = smem + read_slot * SU4;
    read_slot = read_slot == STAGES - 1 ? 0 : read_slot + 1;

    const int strip = 2 * un.pair + (warp >> 2), grp = 4 * un.chunk + (warp & 3);
    if (strip < strips(un) && grp < p.groups) {
      uint32_t wd[12];
      laneWords(st + warp * kBlockU4, lane, wd);
      // V is symmetric; the weight's biases were staged after the 64 scale vectors.
      const uint4* bias_vector = kAsym && !un.v ? st + kStageWU4 + 64 + warp * kScaleU4 + g : nullptr;
      const uint4* sx = st + kStageWU4 + kStageSU4 + (warp & 3) * NT * 64;
      if constexpr (kGroupScaled) {
        blockProductGroupScaled<T, NT>(acc, wd, st[kStageWU4 + warp * kScaleU4 + g], bias_vector, sx, lane);
      } else {
        T2 scale[8], bias[8];
        laneScaleBias<T>(st[kStageWU4 + warp * kScaleU4 + g], bias_vector, scale, bias);
        blockProduct<T, NT>(acc, wd, scale, bias, sx, lane);
      }
    }
    const Unit next = nextUnit(un, it + 1);
    if (it == iters - 1 || next.v != un.v || next.pair != un.pair) {
      const int covered = un.v ? nv : min(u1, (un.pair + 1) * p.chunks) - max(u0, un.pair * p.chunks);
      flushPair(un, covered);
    }
    un = next;
  }
  STREAMK_TRACE(2);
  cpAsyncWait<0>();
  arrivePending();
  STREAMK_TRACE(3);
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
int smemBytes(int nt, bool comp) {
  return stagesFor(nt) * stageU4(nt) * 16 + 128 * nt * 8 * 4 + (comp ? 2 * nt * 64 * 16 : 0);
}
int unitsFor(int64_t n, int64_t k) { return int((n / 64 + 1) / 2) * int((k / 64 + 3) / 4); }

template <typename T, int NT, bool kAsym, bool kComp>
Status launchTyped(const Params& p, int grid, bool overlap, cudaStream_t stream) {
  auto kernel = w3a16StreamKKernel<T, NT, kAsym, kComp>;
  const int smem = smemBytes(NT, kComp);
  static std::once_flag once;
  static cudaError_t attr_err = cudaSuccess;
  std::call_once(once, [&] { attr_err = allowSharedMemory(kernel, smem); });
  MOEWB_CUDA_TRY(attr_err);
  return launchKernel(kernel, p, grid, kThreads, smem, overlap, stream);
}

template <typename T, int NT>
Status launchVariant(const Params& p, bool asym, bool comp, int grid, bool overlap, cudaStream_t st) {
  if (asym) return comp ? launchTyped<T, NT, true, true>(p, grid, overlap, st) : launchTyped<T, NT, true, false>(p, grid, overlap, st);
  return comp ? launchTyped<T, NT, false, true>(p, grid, overlap, st) : launchTyped<T, NT, false, false>(p, grid, overlap, st);
}
template <typename T>
Status launchTiles(const Params& p, bool asym, bool comp, int grid, bool overlap, cudaStream_t st) {
  switch (tilesFor(p.m)) {
    case 1: return launchVariant<T, 1>(p, asym, comp, grid, overlap, st);
    case 2: return launchVariant<T, 2>(p, asym, comp, grid, overlap, st);
    case 4: return launchVariant<T, 4>(p, asym, comp, grid, overlap, st);
    default: return launchVariant<T, 8>(p, asym, comp, grid, overlap, st);
  }
}

constexpr int64_t alignUp(int64_t v) { return (v + 255) / 256 * 256; }

}  // namespace

int64_t streamKWorkspaceBytes(int64_t n) {
  const int64_t pairs = (n / 64 + 1) / 2;
  return alignUp(n * kMaxM * 4) + alignUp(int64_t(kMaxM) * kTCols * 4) + alignUp((pairs + 2) * 4);
}

int streamKGrid(int64_t m, int64_t n, int64_t k, bool compensator) {
  const int grid = std::max(1, std::min(limits().sms * ctasPerSm(tilesFor(m)), unitsFor(n, k)));
  // With a compensator every CTA keeps about three units, so that T (V's units come first) is complete
  // well before the first pair is: a pair that completes before T waits for T's last CTA, which then
  // finishes such pairs one after the other (measured +600% on the DeepSeek shapes with one unit per CTA).
  const int units_with_v = unitsFor(n, k) + int((k / 64 + 3) / 4);
  return compensator ? std::max(1, std::min(grid, units_with_v / 3)) : grid;
}

Status launchW3A16StreamK(const StreamKArgs& a, cudaStream_t stream) {
  const bool comp = a.rank > 0;
  if (comp && (a.rank > kTCols || !a.vw || !a.vs || !a.uw || !a.us))
    return Status::failure(-1, "w3a16Gemm: the INT3 compensator needs U and V in the kernel layout and rank <= 128");
  const int nt = tilesFor(a.m);
  if (limits().optin > 0 && smemBytes(nt, comp) > limits().optin)
    return Status::failure(-1, "w3a16Gemm: the stream-K kernel needs " + std::to_string(smemBytes(nt, comp)) +
                                   " bytes of shared memory per block; this device allows " + std::to_string(limits().optin));
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
  base += alignUp(int64_t(a.n) * kMaxM * 4);
  p.tacc = reinterpret_cast<float*>(base);
  base += alignUp(int64_t(kMaxM) * kTCols * 4);
  p.counters = reinterpret_cast<int*>(base);
  const int grid = a.grid > 0 ? std::min(a.grid, p.units) : streamKGrid(a.m, a.n, a.k, comp);
  const bool asym = a.b != nullptr;
  return a.bf16 ? launchTiles<__nv_bfloat16>(p, asym, comp, grid, a.overlap, stream)
                : launchTiles<half>(p, asym, comp, grid, a.overlap, stream);
}

}  // namespace moewb::gpu::detail

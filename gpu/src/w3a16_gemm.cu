// SPDX-License-Identifier: MIT
// W3A16 GEMM: Y[m, n] = X[m, k] * dequant(W)[n, k]^T for fp16 X and 3-bit W (groups of 64 along k), with
// one host entry point, w3a16Gemm(). Layout and design notes: docs/w3a16-kernel.md.
//
// How the data maps to the tensor cores. For m <= 64 the product is memory bound on the weights, so the
// roles are swapped: the weight tile is the A operand (16 rows of n x 16 of k) of mma.sync m16n8k16 and
// the activations are the B operand (16 of k x 8 of m). A batch of 1..8 then wastes nothing but the
// unused columns of one n8 tile, and the dequantized weights go straight from registers into the mma
// without a round trip through shared memory.
//
//  * A CTA has 4 warps; warp w owns a 64-row strip of W (rows 64*(4*ctaStrip + w) ...), i.e. 4 row tiles
//    rt of 16 rows. The CTA walks a range of k groups (split-k) one group of 64 at a time.
//  * Per group, lane l = 4g + t holds 12 uint32 (three 16-byte cp.async loads of the reshuffled layout):
//    for each row tile 3 words = 32 values = the 16 half2 registers of its A fragments for the four k16
//    steps: register r of step s holds row g + 8*(r&1), columns 16s + 2t + 8*(r>>1) + {0,1}.
//  * A word holds 5 pairs: low value at bit 3i, high value at bit 16+3i, i = 0..4. One lop3 with the mask
//    0x00070007 << 3i and the exponent pattern 0x6400 (1024 in fp16) turns a pair into the half2
//    (1024 + f*q_lo, 1024 + f*q_hi), f = 8^i (pairs 3 and 4 after one shift by 9). One hsub2/hfma2
//    removes the magic number exactly, one hfma2 applies scale and zero: (q - z) * s = q*s + (-z*s),
//    with -z*s precomputed by the repack. The 16th pair is gathered from the spare bits 15 and 31.
//  * The scales of the lane's 8 rows (rows g and g+8 of each row tile) come as one 16-byte vector, the
//    biases -z*s as another.
//  * X for the group (m x 64 fp16) is staged in shared memory with a 16-byte-chunk XOR swizzle
//    (chunk c of row m at c ^ (m & 7)) so that ldmatrix reads the B fragments without bank conflicts.
//  * Loads run STAGES-1 groups ahead through cp.async (weights, scales, biases and X of a group, and V
//    for the fused compensator, form one commit group); the CTA synchronises once per group.
//  * Accumulators are fp32: acc[rt][j] is the C fragment of row tile rt and n8 tile j (batch rows
//    8j..8j+7): c0/c1 = row g, batch 2t/2t+1; c2/c3 = row g+8.
//  * Split-k partial sums go into an fp32 scratch with atomics; the last CTA of a 256-row strip (found
//    with a counter) converts to fp16 and clears the scratch again.
//  * Low-rank compensator Y += (X V^T) U^T: each split adds (X_s V_s^T) U^T for its own k range as extra
//    mma k steps (U is the A operand), so the split-k sum completes it; X_s V_s^T is computed in the main
//    loop from V tiles staged with the weights (m <= 32, rank <= 64) or by a projection kernel first.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "cuda_check.h"
#include "kernel_launch.h"
#include "moewb/gpu/int3_layout.h"
#include "moewb/gpu/w3a16.h"
#include "w3a16_device.cuh"
#include "w3a16_streamk.h"

namespace moewb::gpu {
namespace {

using namespace w3a16dev;

constexpr int kStripRows = 64;                    // rows of W per warp
constexpr int kWarps = 4;                         // warps per CTA (one strip each)
constexpr int kThreads = kWarps * 32;
constexpr int kCtaRows = kWarps * kStripRows;     // 256 rows of W per CTA
constexpr int kMaxM = 64;
constexpr int kMaxRank = 128;
constexpr int kMaxFusedRank = 64;                 // X V^T computed in the main loop up to this rank
// Shared memory per stage, in 16-byte vectors: weights, scales+biases, X (NT*8 rows x 8 chunks).
constexpr int kStageWU4 = kWarps * kBlockU4;      // 384
constexpr int kStageSU4 = kWarps * 2 * kScaleU4;  // 64
__host__ __device__ constexpr int stageU4(int nt) { return kStageWU4 + kStageSU4 + nt * 64; }

struct Params {
  const half* x;
  const uint4* w;
  const uint4* s;
  const uint4* b;         // fp16 bias -z*s per group (kernel layout), nullptr = symmetric
  half* y;
  float* partials;        // [n][kMaxM] fp32 split-k sums, zero between calls
  int* counters;          // [cta_strips] arrivals, zero between calls
  const half* t;          // [m][rank] fp16 X V^T for the compensator
  const half* u;          // [n][rank]
  const half* v;          // [rank][k]
  float* tsum;            // streaming kernel: [cta_strips][kMaxM][rank] fp32 T = X V^T, zero between calls
  int v_smem;             // streaming kernel: stage the split's V slice in shared memory (else read it from L2)
  int m, n, k, rank, split_k, cta_strips;
};

// Without split-k: the warp's fp32 accumulators (C fragments) straight to Y as fp16.
template <int NT>
__device__ __forceinline__ void storeOutput(const Params& p, const float (&acc)[4][NT][4], int strip, int lane) {
  forEachAccumulator<NT>(acc, lane, [&](int row, int mm, float v) {
    if (mm < p.m) p.y[size_t(mm) * p.n + strip * kStripRows + row] = __float2half_rn(v);
  });
}

// Split-k, shared by both kernels: adds the CTA's fp32 accumulators (C fragments: rows g/g+8 of each
// row tile, batch columns 2t/2t+1) into the scratch with atomics (vector atomics on sm_90), then counts
// the CTA's arrival at its strip. Returns true in the last CTA to arrive, which then sees every split's
// sum. Called by all threads of the CTA (it synchronises).
template <int NT>
__device__ __forceinline__ bool addPartialsAndArrive(const Params& p, const float (&acc)[4][NT][4], bool active,
                                                     int row_base, int t, int cta_strip) {
  if (active) {
#pragma unroll
    for (int rt = 0; rt < 4; ++rt)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int mm = j * 8 + 2 * t, row = row_base + rt * 16 + 8 * h;
          float* dst = p.partials + size_t(row) * kMaxM + mm;
          if (mm + 1 < p.m) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            atomicAdd(reinterpret_cast<float2*>(dst), make_float2(acc[rt][j][2 * h], acc[rt][j][2 * h + 1]));
#else
            atomicAdd(dst, acc[rt][j][2 * h]);
            atomicAdd(dst + 1, acc[rt][j][2 * h + 1]);
#endif
          } else if (mm < p.m) {
            atomicAdd(dst, acc[rt][j][2 * h]);
          }
        }
  }
  __threadfence();
  __syncthreads();
  __shared__ int last;
  if (threadIdx.x == 0) last = atomicAdd(p.counters + cta_strip, 1) == p.split_k - 1;
  __syncthreads();
  if (!last) return false;
  __threadfence();
  return true;
}

// kComp: 0 = no compensator, 1 = T = X V^T from the projection kernel, 2 = T computed in the main loop.
template <int NT, int STAGES, bool kAsym, int kComp>
__global__ void __launch_bounds__(kThreads) w3a16Kernel(const Params p) {
  extern __shared__ uint4 smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int groups = p.k / 64, strips = p.n / kStripRows;
  const int cta_strip = blockIdx.x % p.cta_strips, split = blockIdx.x / p.cta_strips;
  const int g0 = int(int64_t(groups) * split / p.split_k), g1 = int(int64_t(groups) * (split + 1) / p.split_k);
  const int strip = cta_strip * kWarps + warp;
  const bool active = strip < strips;
  const uint4* wsrc = p.w + size_t(active ? strip : 0) * groups * kBlockU4;
  const uint4* ssrc = p.s + size_t(active ? strip : 0) * groups * kScaleU4;
  const uint4* bsrc = kAsym ? p.b + size_t(active ? strip : 0) * groups * kScaleU4 : nullptr;
  const uint64_t evict_first = evictFirstPolicy();

  // Every thread's share of a stage is fixed: precompute its source and destination once, so a stage
  // costs a handful of cp.async and pointer increments (the generic index loop cost ~100 integer
  // instructions per group).
  const uint4* wptr = wsrc + lane;
  const int w_off = warp * kBlockU4 + lane;
  const bool scale_lane = lane < kScaleU4, bias_lane = kAsym && lane >= kScaleU4 && lane < 2 * kScaleU4;
  const uint4* sptr = scale_lane ? ssrc + lane : (bias_lane ? bsrc + (lane - kScaleU4) : ssrc);
  const int s_off = kStageWU4 + warp * 16 + lane;
  constexpr int kXChunks = NT * 64;  // 16-byte chunks of X per stage
  constexpr int kXPerThread = (kXChunks + kThreads - 1) / kThreads;
  const half* xptr[kXPerThread];
  int x_off[kXPerThread];
  bool x_valid[kXPerThread], x_mine[kXPerThread];
#pragma unroll
  for (int i = 0; i < kXPerThread; ++i) {
    const int idx = threadIdx.x + i * kThreads;
    const int mm = (idx >> 3) % (NT * 8), c = idx & 7;
    x_mine[i] = idx < kXChunks;
    x_valid[i] = mm < p.m;
    xptr[i] = p.x + size_t(x_valid[i] ? mm : 0) * p.k + c * 8;
    x_off[i] = kStageWU4 + kStageSU4 + mm * 8 + (c ^ (mm & 7));
  }
  const int stage_u4 = stageU4(NT) + (kComp == 2 ? p.rank * 8 : 0);  // + V tile [rank][64] (fused mode)
  // Weights (and V) never depend on earlier kernels; X does. The two halves of a stage are issued
  // separately so that the prologue can fetch weights before the previous kernel has finished (below).
  auto loadWeights = [&](int gi, int slot) {
    uint4* st = smem + slot * stage_u4;
    if (active) {
      const uint4* wg = wptr + size_t(gi) * kBlockU4;
#pragma unroll
      for (int j = 0; j < 3; ++j) cpAsync16Stream(st + w_off + j * 32, wg + j * 32, evict_first);
      if (scale_lane || bias_lane) cpAsync16(st + s_off, sptr + size_t(gi) * kScaleU4, true);
    }
    if constexpr (kComp == 2) {
      // V[:, group] staged like X (swizzled 16-byte chunks) for ldmatrix.
      for (int idx = threadIdx.x; idx < p.rank * 8; idx += kThreads) {
        const int j = idx >> 3, c = idx & 7;
        cpAsync16(st + stageU4(NT) + j * 8 + (c ^ (j & 7)), p.v + size_t(j) * p.k + gi * 64 + c * 8, true);
      }
    }
  };
  auto loadActivations = [&](int gi, int slot) {
    uint4* st = smem + slot * stage_u4;
#pragma unroll
    for (int i = 0; i < kXPerThread; ++i)
      if (x_mine[i]) cpAsync16(st + x_off[i], xptr[i] + gi * 64, x_valid[i]);
  };
  // Fused compensator: warp w accumulates rows 16w..16w+15 of T_split = V[:, range] X[:, range]^T (its
  // split's share; split-k adds the shares up together with the main product). Spreading the tiles' k
  // steps over all four warps instead was measured slower (every warp then pays a B-fragment load).
  float acc_t[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_t[j][e] = 0.f;
  const bool t_warp = kComp == 2 && warp < p.rank / 16;

  float acc[4][NT][4];
  clearAccumulators<NT>(acc);

  const int iters = g1 - g0;
  // Weights before griddepcontrol.wait, X after it (W3A16Config::overlap; see pipelinePrologue).
  pipelinePrologue<STAGES>(iters, [&](int s) { loadWeights(g0 + s, s); }, [&](int s) { loadActivations(g0 + s, s); });
  int read_slot = 0, write_slot = STAGES - 1;  // rotating stage indices (no modulo by STAGES)
  for (int it = 0; it < iters; ++it) {
    cpAsyncWait<STAGES - 2>();
    __syncthreads();
    if (it + STAGES - 1 < iters) {
      loadWeights(g0 + it + STAGES - 1, write_slot);
      loadActivations(g0 + it + STAGES - 1, write_slot);
    }
    cpAsyncCommit();
    write_slot = write_slot == STAGES - 1 ? 0 : write_slot + 1;
    const int slot = read_slot;
    read_slot = read_slot == STAGES - 1 ? 0 : read_slot + 1;
    const uint4* st = smem + slot * stage_u4;
    if constexpr (kComp == 2) {
      if (t_warp) {
        const uint4* sv = st + stageU4(NT);
        const uint4* sxt = st + kStageWU4 + kStageSU4;
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          uint32_t b[NT][2];
          loadB<NT>(b, sxt, s, lane);
          // A fragment of V rows 16*warp.. via ldmatrix.x4: (rows 0-7 | 8-15) x (chunk 2s | 2s+1).
          const int q = lane >> 3, j = warp * 16 + (q & 1) * 8 + (lane & 7), c = 2 * s + (q >> 1);
          uint32_t a[4];
          ldmatrixX4(a, sv + j * 8 + (c ^ (j & 7)));
#pragma unroll
          for (int jn = 0; jn < NT; ++jn) mma16816<half>(acc_t[jn], a, b[jn][0], b[jn][1]);
        }
      }
    }
    if (!active) continue;

    uint32_t wd[12];
    laneWords(st + warp * kBlockU4, lane, wd);
    half2 scale[8], bias[8];
    laneScaleBias<half>(st[kStageWU4 + warp * 16 + g], kAsym ? st + kStageWU4 + warp * 16 + kScaleU4 + g : nullptr, scale, bias);
    blockProduct<half, NT>(acc, wd, scale, bias, st + kStageWU4 + kStageSU4, lane);
  }
  cpAsyncWait<0>();

  const int row_base = strip * kStripRows + g;
  // Low-rank compensator as extra tensor-core k steps: A = U (fp16, straight from global memory), B = T
  // staged in shared memory like an X tile. Fused mode: every split adds (its T share) U^T; mode 1: split 0
  // adds T U^T with T from the projection kernel.
  if constexpr (kComp != 0) {
    auto compSteps = [&](const uint4* sx, int pass, int cols) {
      if (!active) return;
      for (int s = 0; s < cols / 16; ++s) {
        uint32_t b[NT][2];
        loadB<NT>(b, sx, s, lane);
#pragma unroll
        for (int rt = 0; rt < 4; ++rt) {
          uint32_t a[4];
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int row = row_base + rt * 16 + 8 * (r & 1);
            const int col = pass * 64 + 16 * s + 2 * t + 8 * (r >> 1);
            a[r] = __ldg(reinterpret_cast<const unsigned int*>(p.u + size_t(row) * p.rank + col));
          }
#pragma unroll
          for (int j = 0; j < NT; ++j) mma16816<half>(acc[rt][j], a, b[j][0], b[j][1]);
        }
      }
    };
    if constexpr (kComp == 2) {
      __syncthreads();  // all warps are done with the pipeline buffers
      uint4* sx = smem;
      half* sxh = reinterpret_cast<half*>(sx);
      for (int idx = threadIdx.x; idx < NT * 64; idx += kThreads) sx[idx] = make_uint4(0, 0, 0, 0);
      __syncthreads();
      if (t_warp) {
#pragma unroll
        for (int jn = 0; jn < NT; ++jn)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int j = warp * 16 + g + 8 * (e >> 1), mm = jn * 8 + 2 * t + (e & 1);
            sxh[(mm * 8 + ((j >> 3) ^ (mm & 7))) * 8 + (j & 7)] = __float2half_rn(acc_t[jn][e]);
          }
      }
      __syncthreads();
      compSteps(sx, 0, p.rank);
    } else {
      if (split == 0) {
        __syncthreads();  // all warps are done with the pipeline buffers
        for (int pass = 0; pass * 64 < p.rank; ++pass) {
          uint4* sx = smem;
          const int cols = min(64, p.rank - pass * 64);
          for (int idx = threadIdx.x; idx < NT * 64; idx += kThreads) {
            const int mm = idx >> 3, c = idx & 7;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (mm < p.m && c * 8 < cols) v = *reinterpret_cast<const uint4*>(p.t + size_t(mm) * p.rank + pass * 64 + c * 8);
            sx[mm * 8 + (c ^ (mm & 7))] = v;
          }
          __syncthreads();
          compSteps(sx, pass, cols);
          __syncthreads();
        }
      }
    }
  }

  if (p.split_k == 1) {
    if (active) storeOutput<NT>(p, acc, strip, lane);
    return;
  }

  // Split-k: fp32 atomics into the scratch (vector atomics on sm_90), then the last CTA of the strip
  // converts its 256 rows and clears the scratch for the next call. (Plain stores of per-split partials
  // summed by the last CTA were measured slower: that CTA's serial sum becomes the tail.)
  if (!addPartialsAndArrive<NT>(p, acc, active, row_base, t, cta_strip)) return;
  const int r0 = cta_strip * kCtaRows, rows = min(kCtaRows, p.n - r0);
  for (int idx = threadIdx.x; idx < rows * p.m; idx += kThreads) {
    const int row = r0 + idx % rows, mm = idx / rows;
    float* src = p.partials + size_t(row) * kMaxM + mm;
    const float v = __ldcg(src);
    __stcg(src, 0.f);
    p.y[size_t(mm) * p.n + row] = __float2half_rn(v);
  }
  if (threadIdx.x == 0) p.counters[cta_strip] = 0;
}

// T[m][rank] = X V^T (fp16) for the compensator when it cannot be fused (m > 32 or rank > 64): one block
// per output, 16-byte loads along k.
__global__ void lowRankProjectKernel(const half* x, const half* v, half* tout, int k, int rank) {
  const int mm = blockIdx.x / rank, j = blockIdx.x % rank;
  const uint4* xr = reinterpret_cast<const uint4*>(x + size_t(mm) * k);
  const uint4* vr = reinterpret_cast<const uint4*>(v + size_t(j) * k);
  // Four independent 16-byte loads in flight per thread: the kernel is latency bound for long k.
  float acc = 0.f;
  const int chunks = k / 8;
  for (int c0 = threadIdx.x; c0 < chunks; c0 += 4 * blockDim.x) {
    uint4 a[4], b[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int c = c0 + u * int(blockDim.x);
      a[u] = c < chunks ? xr[c] : make_uint4(0, 0, 0, 0);
      b[u] = c < chunks ? vr[c] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const half2* ah = reinterpret_cast<const half2*>(&a[u]);
      const half2* bh = reinterpret_cast<const half2*>(&b[u]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 fa = __half22float2(ah[i]), fb = __half22float2(bh[i]);
        acc += fa.x * fb.x + fa.y * fb.y;
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
  __shared__ float part[32];
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.f;
    for (int w = 0; w < int(blockDim.x / 32); ++w) sum += part[w];
    tout[blockIdx.x] = __float2half_rn(sum);
  }
}

// One thread per (block, lane): the same decoder as the GEMM, written out as fp16 [n][k].
template <bool kAsym>
__global__ void w3a16DequantKernel(const uint4* w, const uint4* s, const uint4* bias, half* out, int n, int k) {
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int groups = k / 64;
  const int64_t block = tid / 32;
  if (block >= int64_t(n / 64) * groups) return;
  const int lane = int(tid % 32), g = lane / 4, t = lane % 4;
  const int strip = int(block / groups), gi = int(block % groups);
  uint32_t wd[12];
  laneWords(w + block * kBlockU4, lane, wd);
  const uint4 sv = s[block * kScaleU4 + g];
  const half* sh = reinterpret_cast<const half*>(&sv);
  uint4 bv{};
  if constexpr (kAsym) bv = bias[block * kScaleU4 + g];
  const half* bh = reinterpret_cast<const half*>(&bv);
#pragma unroll
  for (int rt = 0; rt < 4; ++rt)
#pragma unroll
    for (int pp = 0; pp < 16; ++pp) {
      const int sidx = 2 * rt + (pp & 1);
      const half b = kAsym ? bh[sidx] : __hmul(__float2half(-4.0f), sh[sidx]);
      const half2 q = decodePair<half>(pp, wd[3 * rt], wd[3 * rt + 1], wd[3 * rt + 2]);
      const half2 val = __hfma2(q, __half2half2(sh[sidx]), __half2half2(b));
      const int row = strip * 64 + rt * 16 + g + 8 * (pp & 1);
      const int col = gi * 64 + (pp / 4) * 16 + 2 * t + 8 * ((pp >> 1) & 1);
      *reinterpret_cast<half2*>(out + size_t(row) * k + col) = val;
    }
}

// ---------------------------------------------------------------------------------------------------
// Streaming kernel for m <= 32 (by default only with a compensator at m = 9..32 and k >= 8192; see
// useStream). Idea: at small batch the product is a weight stream, so every warp reads its weight blocks
// straight into registers with plain 16-byte loads, several blocks ahead, with no cp.async bookkeeping and
// no barrier inside the main loop. Measured (docs/benchmarks.md): without a compensator it is NOT faster
// than the pipelined kernel (m = 1: 17.4-18.4 us against 15.3-15.7 us on 4096x14336); ncu showed it
// latency bound (0.47 instructions issued per cycle and scheduler, 3.6 warps per scheduler, ~260 SASS
// instructions per 64x64 block). Its compensator scheme is what it is kept for.
//
//  * CTA = 8 warps; warp w owns strip 8*ctaStrip + w (64 rows of W; CTA tile 512 rows) and walks the
//    CTA's k range [g0, g1) (split-k) group by group. Lane l = 4g + t loads its three 16-byte words of the
//    block (the same kernel layout: vector j of all 32 lanes is one contiguous 512-byte run), the 16-byte
//    vector of its 8 rows' scales (and biases), kDepth blocks ahead in registers (ld.global.cs: the weights
//    are read once, so they are marked evict-first in L2 and bypass L1).
//  * X for the CTA's whole k range is staged once in shared memory, pre-arranged as B fragments: for group
//    gl, batch row mm (NT*8 rows, zero above m) and lane column t, 8 words = (b0, b1) of the four k16 steps
//    s, i.e. word 2s+h holds X[mm][16s + 8h + 2t + {0,1}]. A lane gets all its B fragments of a group with
//    two 16-byte shared loads; the two halves are swapped on odd rows, so that the 8 lanes of one
//    quarter-warp phase (g = 0..1, t = 0..3) hit distinct banks.
//  * Dequantization and mma.sync as in the pipelined kernel (swap-AB: W is the A operand).
//  * Split-k partials go to the fp32 scratch with atomics, the last CTA of a 512-row strip converts to fp16.
//  * Compensator: each CTA computes its split's share T_s = X_s V_s^T (m x r, mma.sync with V as the A
//    operand and the staged X as B) and adds it atomically into a per-strip fp32 T; after the arrivals the
//    last CTA of the strip holds the complete T = X V^T and adds T U^T to its 512 rows while converting.
//    U is thus read once per call and no split repeats the U product.
constexpr int kSWarps = 8;
constexpr int kSThreads = kSWarps * 32;
constexpr int kSCtaRows = kSWarps * kStripRows;  // 512
constexpr int kSMaxXBytes = 96 * 1024;           // staged X per CTA (bounds the k range of one split)
constexpr int kSMaxVBytes = 64 * 1024;           // V slice staged for the compensator (else read from L2)

__device__ __forceinline__ uint4 ldStream(const uint4* p) { return __ldcs(p); }

// Resident CTAs per SM the register allocation is made for. (Depth 2 with three CTAs per SM at m <= 8,
// i.e. <= 80 registers, was measured: it spills and ran 1.5x slower.)
__host__ __device__ constexpr int streamMinBlocks(int nt, int) { return nt <= 2 ? 2 : 1; }

template <int NT, int kDepth, bool kAsym, bool kComp>
__global__ void __launch_bounds__(kSThreads, streamMinBlocks(NT, kDepth)) w3a16StreamKernel(const Params p) {
  extern __shared__ uint4 smem[];
  uint32_t* xs = reinterpret_cast<uint32_t*>(smem);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int groups = p.k / 64, strips = p.n / kStripRows;
  const int cta_strip = blockIdx.x % p.cta_strips, split = blockIdx.x / p.cta_strips;
  const int g0 = int(int64_t(groups) * split / p.split_k), g1 = int(int64_t(groups) * (split + 1) / p.split_k);
  const int iters = g1 - g0;
  const int strip = cta_strip * kSWarps + warp;
  const bool active = strip < strips;
  const size_t blk0 = size_t(active ? strip : 0) * groups + g0;
  const uint4* wp = p.w + blk0 * kBlockU4 + lane;
  const uint4* sp = p.s + blk0 * kScaleU4 + g;
  const uint4* bp = kAsym ? p.b + blk0 * kScaleU4 + g : nullptr;

  // Registers of the blocks in flight: slot d holds iteration i with i % kDepth == d.
  uint4 wv[kDepth][3], sv[kDepth], bv[kDepth];
#pragma unroll
  for (int d = 0; d < kDepth; ++d) {
    if (active && d < iters) {
      const uint4* w = wp + size_t(d) * kBlockU4;
      wv[d][0] = ldStream(w);
      wv[d][1] = ldStream(w + 32);
      wv[d][2] = ldStream(w + 64);
      sv[d] = ldStream(sp + size_t(d) * kScaleU4);
      if constexpr (kAsym) bv[d] = ldStream(bp + size_t(d) * kScaleU4);
    }
  }

  if constexpr (kComp) {
    if (p.v_smem) {
      // The split's slice V[:, g0*64 .. g1*64) -> shared memory after X, rows padded by 16 bytes.
      const int row_chunks = iters * 8, vstride_u4 = row_chunks + 1;
      uint4* vdst = smem + iters * NT * 64;
      for (int idx = threadIdx.x; idx < p.rank * row_chunks; idx += kSThreads) {
        const int r = idx / row_chunks, c = idx % row_chunks;
        cpAsync16(vdst + r * vstride_u4 + c, p.v + size_t(r) * p.k + g0 * 64 + c * 8, true);
      }
      cpAsyncCommit();
    }
  }
  // Stage X (while the first weight loads are in flight). Word index within a group: row*32 + t*8 +
  // 4*(hq ^ (row & 1)) + (j & 3), j = 2s + h, hq = j >> 2. A 16-byte chunk q of a row of X (columns
  // 8q..8q+7 of the group) is exactly word j = q of the four lanes t = 0..3, so X is read with 16-byte
  // loads, four per thread in flight (a loop of dependent 4-byte loads here cost several microseconds).
  constexpr int kRows = NT * 8;
  {
    const int chunks = iters * kRows * 8;
    for (int c0 = 0; c0 < chunks; c0 += 4 * kSThreads) {
      uint4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int c = c0 + u * kSThreads + int(threadIdx.x);
        const int row = (c >> 3) % kRows, gl = c / (kRows * 8), q = c & 7;
        v[u] = make_uint4(0, 0, 0, 0);
        if (c < chunks && row < p.m)
          v[u] = __ldg(reinterpret_cast<const uint4*>(p.x + size_t(row) * p.k + (g0 + gl) * 64 + q * 8));
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int c = c0 + u * kSThreads + int(threadIdx.x);
        if (c < chunks) {
          const int row = (c >> 3) % kRows, gl = c / (kRows * 8), q = c & 7;
          uint32_t* dst = xs + (gl * kRows + row) * 32 + 4 * ((q >> 2) ^ (row & 1)) + (q & 3);
          dst[0] = v[u].x;
          dst[8] = v[u].y;
          dst[16] = v[u].z;
          dst[24] = v[u].w;
        }
      }
    }
  }
  __syncthreads();

  // B fragments of group gl for all n8 tiles: xb[jn][0] = steps 0,1; xb[jn][1] = steps 2,3.
  auto loadXB = [&](int gl, uint4 (&xb)[NT][2]) {
#pragma unroll
    for (int jn = 0; jn < NT; ++jn) {
      const int row = jn * 8 + g;
      const uint4* base = reinterpret_cast<const uint4*>(xs + (gl * kRows + row) * 32 + t * 8);
      xb[jn][0] = base[(row & 1)];
      xb[jn][1] = base[(row & 1) ^ 1];
    }
  };

  float acc[4][NT][4];
  clearAccumulators<NT>(acc);

  if (active) {
    for (int it = 0; it < iters; it += kDepth) {
#pragma unroll
      for (int d = 0; d < kDepth; ++d) {
        const int i = it + d;
        if (i < iters) {
          // Take the block out of its slot and refill the slot kDepth groups ahead before computing.
          const uint32_t wd[12] = {wv[d][0].x, wv[d][0].y, wv[d][0].z, wv[d][0].w, wv[d][1].x, wv[d][1].y,
                                   wv[d][1].z, wv[d][1].w, wv[d][2].x, wv[d][2].y, wv[d][2].z, wv[d][2].w};
          const uint4 scv = sv[d];
          uint4 biv = make_uint4(0, 0, 0, 0);
          if constexpr (kAsym) biv = bv[d];
          if (i + kDepth < iters) {
            const uint4* w = wp + size_t(i + kDepth) * kBlockU4;
            wv[d][0] = ldStream(w);
            wv[d][1] = ldStream(w + 32);
            wv[d][2] = ldStream(w + 64);
            sv[d] = ldStream(sp + size_t(i + kDepth) * kScaleU4);
            if constexpr (kAsym) bv[d] = ldStream(bp + size_t(i + kDepth) * kScaleU4);
          }
          const half* sh = reinterpret_cast<const half*>(&scv);
          const half* bh = reinterpret_cast<const half*>(&biv);
          half2 scale[8], bias[8];  // index 2*rt + hi_row
#pragma unroll
          for (int q = 0; q < 8; ++q) {
            scale[q] = __half2half2(sh[q]);
            bias[q] = kAsym ? __half2half2(bh[q]) : __half2half2(__hmul(__float2half(-4.0f), sh[q]));
          }
          uint4 xb[NT][2];
          loadXB(i, xb);
#pragma unroll
          for (int s = 0; s < 4; ++s) {
#pragma unroll
            for (int rt = 0; rt < 4; ++rt) {
              uint32_t a[4];
#pragma unroll
              for (int r = 0; r < 4; ++r) {
                const half2 q = decodePair<half>(4 * s + r, wd[3 * rt], wd[3 * rt + 1], wd[3 * rt + 2]);
                a[r] = asU32<half2>(__hfma2(q, scale[2 * rt + (r & 1)], bias[2 * rt + (r & 1)]));
              }
#pragma unroll
              for (int jn = 0; jn < NT; ++jn) {
                const uint4 q = xb[jn][s >> 1];
                mma16816<half>(acc[rt][jn], a, (s & 1) ? q.z : q.x, (s & 1) ? q.w : q.y);
              }
            }
          }
        }
      }
    }
  }

  if constexpr (kComp) {
    // T_s^T[r][mm] = sum over this split's k of V[r][k] X[mm][k]: A = 16 rows of V, B = X. Done after
    // the main loop, so that the V slice (staged by cp.async at the start when it fits) is long in.
    if (p.v_smem) {
      cpAsyncWait<0>();
      __syncthreads();
    }
    const int rt_count = p.rank / 16;
    const int per = kSWarps / rt_count;  // warps per rank tile (rank <= 128 -> >= 1)
    if (warp < rt_count * per) {
      const int rt = warp % rt_count;
      float acc_t[NT][4];
#pragma unroll
      for (int jn = 0; jn < NT; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_t[jn][e] = 0.f;
      // Row stride of the staged slice: iters*64 + 8 halves (the 16-byte pad puts rows g = 0..7 on
      // different banks).
      const int vstride = iters * 64 + 8;
      const half* vsm = reinterpret_cast<const half*>(smem + iters * NT * 64) + size_t(rt * 16 + g) * vstride + 2 * t;
      const half* v0 = p.v + size_t(rt * 16 + g) * p.k + 2 * t;
      const size_t v8g = size_t(8) * p.k;
      for (int gl = warp / rt_count; gl < iters; gl += 2 * per) {
        // Two groups per pass: all 32 V words of both are requested before the first mma.
        uint32_t a[2][4][4];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int gg = min(gl + hh * per, iters - 1);
#pragma unroll
          for (int s = 0; s < 4; ++s)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              const int off = 16 * s + 8 * (r >> 1);
              if (p.v_smem)
                a[hh][s][r] = *reinterpret_cast<const uint32_t*>(vsm + (r & 1) * 8 * vstride + gg * 64 + off);
              else
                a[hh][s][r] = __ldg(reinterpret_cast<const unsigned int*>(v0 + (r & 1) * v8g + (g0 + gg) * 64 + off));
            }
        }
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          if (gl + hh * per < iters) {
            uint4 xb[NT][2];
            loadXB(gl + hh * per, xb);
#pragma unroll
            for (int s = 0; s < 4; ++s)
#pragma unroll
              for (int jn = 0; jn < NT; ++jn) {
                const uint4 q = xb[jn][s >> 1];
                mma16816<half>(acc_t[jn], a[hh][s], (s & 1) ? q.z : q.x, (s & 1) ? q.w : q.y);
              }
          }
        }
      }
      float* tdst = p.tsum + size_t(cta_strip) * kMaxM * p.rank;
#pragma unroll
      for (int jn = 0; jn < NT; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = rt * 16 + g + 8 * (e >> 1), mm = jn * 8 + 2 * t + (e & 1);
          if (mm < p.m) atomicAdd(tdst + mm * p.rank + r, acc_t[jn][e]);
        }
    }
  }

  const int row_base = strip * kStripRows + g;
  if (p.split_k == 1 && !kComp) {
    if (active) storeOutput<NT>(p, acc, strip, lane);
    return;
  }
  if (!addPartialsAndArrive<NT>(p, acc, active, row_base, t, cta_strip)) return;
  // Last CTA of the strip: every warp finishes its own 64 rows. The C fragments of the main loop map
  // lane (g, t) to rows g/g+8 of each row tile and batch columns 2t/2t+1; the same map is used here to
  // read the summed partials (and clear them for the next call).
  float* ts = reinterpret_cast<float*>(smem);  // complete T [m][rank] fp32 (compensator); X is no longer needed
  if constexpr (kComp) {
    float* tsrc = p.tsum + size_t(cta_strip) * kMaxM * p.rank;
    for (int idx = threadIdx.x; idx < p.m * p.rank; idx += kSThreads) {
      ts[idx] = __ldcg(tsrc + idx);
      __stcg(tsrc + idx, 0.f);
    }
    __syncthreads();
  }
  if (active) {
    float cacc[4][NT][4];
    clearAccumulators<NT>(cacc);
    if constexpr (kComp) {
      // T U^T on the tensor cores: A = 16 rows of U x 16 of rank (global, read once per call), B = T as
      // fp16 (k = rank, n = batch): b0 = T[mm][16ks + 2t + {0,1}], b1 = the same + 8; zero for mm >= m.
      for (int ks = 0; ks < p.rank / 16; ++ks) {
        uint32_t b[NT][2];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const int mm = j * 8 + g;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float2 tv = make_float2(0.f, 0.f);
            if (mm < p.m) tv = *reinterpret_cast<const float2*>(ts + mm * p.rank + 16 * ks + 8 * h + 2 * t);
            b[j][h] = asU32<half2>(__floats2half2_rn(tv.x, tv.y));
          }
        }
#pragma unroll
        for (int rt = 0; rt < 4; ++rt) {
          const half* u0 = p.u + size_t(row_base + rt * 16) * p.rank + 16 * ks + 2 * t;
          const half* u8 = u0 + size_t(8) * p.rank;
          uint32_t a[4];
          a[0] = __ldg(reinterpret_cast<const unsigned int*>(u0));
          a[1] = __ldg(reinterpret_cast<const unsigned int*>(u8));
          a[2] = __ldg(reinterpret_cast<const unsigned int*>(u0 + 8));
          a[3] = __ldg(reinterpret_cast<const unsigned int*>(u8 + 8));
#pragma unroll
          for (int j = 0; j < NT; ++j) mma16816<half>(cacc[rt][j], a, b[j][0], b[j][1]);
        }
      }
    }
    forEachAccumulator<NT>(cacc, lane, [&](int strip_row, int mm, float c) {
      if (mm < p.m) {
        const int row = strip * kStripRows + strip_row;
        float* src = p.partials + size_t(row) * kMaxM + mm;
        const float v = __ldcg(src) + c;
        __stcg(src, 0.f);
        p.y[size_t(mm) * p.n + row] = __float2half_rn(v);
      }
    });
  }
  if (threadIdx.x == 0) p.counters[cta_strip] = 0;
}

struct DeviceLimits {
  int sms = 0, major = 0;
  bool ok = false;
};
DeviceLimits deviceLimits() {
  static std::once_flag once;
  static DeviceLimits lim;
  std::call_once(once, [] {
    int dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&lim.sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&lim.major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess)
      lim.ok = true;
    else
      lim.sms = 132;
  });
  return lim;
}

int ctasPerSmFor(int nt) { return nt <= 2 ? 4 : (nt == 4 ? 3 : 2); }  // planned residency per SM
int tilesFor(int64_t m) { return m <= 8 ? 1 : (m <= 16 ? 2 : (m <= 32 ? 4 : 8)); }

template <int NT, int STAGES, bool kAsym, int kComp>
Status launchTyped(const Params& p, int grid, bool overlap, cudaStream_t stream) {
  const int smem_bytes = STAGES * (stageU4(NT) + (kComp == 2 ? p.rank * 8 : 0)) * 16;
  static std::once_flag once;
  static cudaError_t attr_err = cudaSuccess;
  std::call_once(once, [&] {
    const int max_bytes = STAGES * (stageU4(NT) + (kComp == 2 ? kMaxFusedRank * 8 : 0)) * 16;
    attr_err = detail::allowSharedMemory(w3a16Kernel<NT, STAGES, kAsym, kComp>, max_bytes);
  });
  MOEWB_CUDA_TRY(attr_err);
  return detail::launchKernel(w3a16Kernel<NT, STAGES, kAsym, kComp>, p, grid, kThreads, smem_bytes, overlap, stream);
}

template <int NT, int STAGES>
Status launchVariant(const Params& p, bool asym, int comp_mode, int grid, bool overlap, cudaStream_t stream) {
  if (asym) {
    if (comp_mode == 2) return launchTyped<NT, STAGES, true, 2>(p, grid, overlap, stream);
    if (comp_mode == 1) return launchTyped<NT, STAGES, true, 1>(p, grid, overlap, stream);
    return launchTyped<NT, STAGES, true, 0>(p, grid, overlap, stream);
  }
  if (comp_mode == 2) return launchTyped<NT, STAGES, false, 2>(p, grid, overlap, stream);
  if (comp_mode == 1) return launchTyped<NT, STAGES, false, 1>(p, grid, overlap, stream);
  return launchTyped<NT, STAGES, false, 0>(p, grid, overlap, stream);
}

constexpr int64_t alignUp(int64_t v) { return (v + 255) / 256 * 256; }

// Streaming kernel: launch geometry. NT <= 2 runs two CTAs (16 warps) per SM, NT = 4 one.
int streamTiles(int64_t m) { return m <= 8 ? 1 : (m <= 16 ? 2 : 4); }
int streamCtaStrips(int64_t n) { return int((n + kSCtaRows - 1) / kSCtaRows); }
int streamMinSplit(int nt, int groups) {
  const int max_groups = kSMaxXBytes / (nt * 1024);  // X staged per CTA: nt KB per group
  return (groups + max_groups - 1) / max_groups;
}
int streamChooseSplit(int64_t m, int64_t n, int64_t k) {
  const int nt = streamTiles(m), groups = int(k / 64);
  const int target = deviceLimits().sms * (nt <= 2 ? 2 : 1);
  int split = std::max(1, target / streamCtaStrips(n));
  split = std::min(split, groups);
  return std::max(split, streamMinSplit(nt, groups));
}

template <int NT, int D, bool kAsym, bool kComp>
Status launchStreamTyped(const Params& p, cudaStream_t stream) {
  const int iters_max = (p.k / 64 + p.split_k - 1) / p.split_k;
  const int v_bytes = kComp ? p.rank * (iters_max * 64 + 8) * 2 : 0;
  // Opt-in limit of the device (227 KB on sm_90, 163 KB on sm_80, 99 KB on sm_86/89).
  static std::once_flag once;
  static cudaError_t attr_err = cudaSuccess;
  static int smem_limit = kSMaxXBytes + kSMaxVBytes;
  std::call_once(once, [&] {
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess && optin > 0)
      smem_limit = std::min(smem_limit, optin);
    attr_err = cudaFuncSetAttribute(w3a16StreamKernel<NT, D, kAsym, kComp>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    smem_limit);
  });
  Params q = p;
  const int x_bytes = iters_max * NT * 1024;
  q.v_smem = kComp && v_bytes <= kSMaxVBytes && x_bytes + v_bytes <= smem_limit ? 1 : 0;
  const int smem_bytes = std::max(x_bytes + (q.v_smem ? v_bytes : 0), kComp ? p.m * p.rank * 4 : 0);
  if (smem_bytes > smem_limit)
    return Status::failure(-1, "w3a16Gemm: the streaming kernel needs " + std::to_string(smem_bytes) +
                                   " bytes of shared memory, the device allows " + std::to_string(smem_limit) +
                                   " (use a larger split_k)");
  MOEWB_CUDA_TRY(attr_err);
  const int grid = p.cta_strips * p.split_k;
  w3a16StreamKernel<NT, D, kAsym, kComp><<<unsigned(grid), kSThreads, size_t(smem_bytes), stream>>>(q);
  MOEWB_CUDA_TRY(cudaGetLastError());
  return Status::success();
}
template <int NT, int D>
Status launchStream(const Params& p, bool asym, bool comp, cudaStream_t stream) {
  if (asym) return comp ? launchStreamTyped<NT, D, true, true>(p, stream) : launchStreamTyped<NT, D, true, false>(p, stream);
  return comp ? launchStreamTyped<NT, D, false, true>(p, stream) : launchStreamTyped<NT, D, false, false>(p, stream);
}
int pipelinedChooseSplit(int64_t m, int64_t n, int64_t k);
// Which kernel runs (measured on the H200, docs/benchmarks.md): the pipelined kernel is faster without a
// compensator at every batch size; with the compensator the streaming kernel is faster at m = 9..32 for
// long k (k >= 8192: many splits, each of which repeats the U product in the pipelined kernel), and
// slower or equal on the k = 4096 and the short-k DeepSeek shapes.
bool useStream(int64_t m, int64_t k, int rank, const W3A16Config* config) {
  if (m > 32) return false;
  if (config && config->kernel == 1) return true;
  if (config && config->kernel == 2) return false;
  return rank > 0 && m > 8 && k >= 8192;
}

}  // namespace


namespace {
int pipelinedChooseSplit(int64_t m, int64_t n, int64_t k) {
  const int nt = tilesFor(m);
  const int groups = int(k / 64);
  const int cta_strips = int((n + kCtaRows - 1) / kCtaRows);
  const int target = deviceLimits().sms * ctasPerSmFor(nt);
  // Fill one wave of resident CTAs, but keep a few groups per CTA so its pipeline has work.
  const int min_groups = nt <= 2 ? 2 : 4;
  int split = std::max(1, target / std::max(1, cta_strips));
  split = std::min(split, std::max(1, groups / min_groups));
  return std::max(1, std::min(split, groups));
}
}  // namespace

// The split-k kernels' scratch (zero between calls) followed by the stream-K kernel's (its counters and
// T zero between calls, its partial sums overwritten by every call).
namespace {
int64_t splitKWorkspaceBytes(int64_t n, int rank) {
  const int64_t cta_strips = (n + kCtaRows - 1) / kCtaRows;
  return alignUp(n * kMaxM * 4) + alignUp(cta_strips * 4) + alignUp(int64_t(kMaxM) * std::max(rank, 0) * 2) +
         alignUp(int64_t(streamCtaStrips(n)) * kMaxM * std::max(rank, 0) * 4);
}

}  // namespace

int64_t w3a16WorkspaceBytes(int64_t n, int rank) { return splitKWorkspaceBytes(n, rank) + detail::streamKWorkspaceBytes(n); }

namespace {
// Which kernel a call runs: 1 streaming, 2 pipelined split-k, 3 stream-K (see W3A16Config::kernel).
// Stream-K runs what only it can do (bf16 activations, MiLo's INT3 compensators) and every fp16 call
// without a compensator: since its sums across CTAs went conflict-free (sixth session) it measured faster
// than the split-k kernels at every Mixtral and DeepSeek-MoE expert shape and batch 1..64 on the H100
// (docs/benchmarks.md, kernel comparison: 1.08x at batch 1 on 4096x14336, 1.3-2.9x at batch 16..64).
// The split-k kernels remain for fp16 U and V.
int chooseKernel(int64_t m, int64_t k, const W3A16Weights& w, const LowRankCompensator* comp, const W3A16Config* config) {
  const int rank = comp ? comp->rank : 0;
  const int asked = config ? config->kernel : 0;
  if (asked == 1 || asked == 2 || asked == 3) return asked;
  if (w.type == W3A16Type::Bf16 || rank == 0 || comp->u3.packed) return 3;
  return useStream(m, k, rank, config) ? 1 : 2;
}

Status launchStreamK(const void* x, const W3A16Weights& w, void* y, int64_t m, const LowRankCompensator* comp,
                     void* workspace, const W3A16Config* config, cudaStream_t st) {
  detail::StreamKArgs a;
  a.x = x;
  a.y = y;
  a.bf16 = w.type == W3A16Type::Bf16;
  a.w = w.packed;
  a.s = w.scales;
  a.b = w.bias;
  a.m = int(m);
  a.n = int(w.n);
  a.k = int(w.k);
  if (comp && comp->rank > 0) {
    const int64_t v_rows = comp->rank <= 64 ? 64 : 128, u_cols = (comp->rank + 63) / 64 * 64;
    const W3A16Weights &u = comp->u3, &v = comp->v3;
    if (!u.packed || !u.scales || !v.packed || !v.scales)
      return Status::failure(-1, "w3a16Gemm: the stream-K kernel needs the INT3 compensator (u3, v3), not fp16 U, V");
    if (v.n != v_rows || v.k != w.k || u.n != w.n || u.k != u_cols || u.bias || v.bias || u.type != w.type || v.type != w.type)
      return Status::failure(-1, "w3a16Gemm: INT3 compensator of rank " + std::to_string(comp->rank) + " needs V as a symmetric " +
                                     std::to_string(v_rows) + "x" + std::to_string(w.k) + " and U as a symmetric " +
                                     std::to_string(w.n) + "x" + std::to_string(u_cols) +
                                     " kernel-layout weight in the weights' type; got V " + std::to_string(v.n) + "x" +
                                     std::to_string(v.k) + ", U " + std::to_string(u.n) + "x" + std::to_string(u.k));
    a.vw = v.packed;
    a.vs = v.scales;
    a.uw = u.packed;
    a.us = u.scales;
    a.rank = comp->rank;
  }
  a.workspace = static_cast<char*>(workspace) + splitKWorkspaceBytes(w.n, comp ? comp->rank : 0);
  a.overlap = deviceLimits().major >= 9 && !(config && config->overlap == 2);
  a.grid = config && config->split_k > 0 ? config->split_k : 0;  // the benchmark's override: CTAs
  return detail::launchW3A16StreamK(a, st);
}
}  // namespace

int w3a16KernelFor(int64_t m, int64_t n, int64_t k, const W3A16Weights& w, const LowRankCompensator* comp,
                   const W3A16Config* config, int* work_split) {
  const int kernel = chooseKernel(m, k, w, comp, config);
  int split = 0;
  if (kernel == 3) split = config && config->split_k > 0 ? config->split_k : detail::streamKGrid(m, n, k);
  else if (config && config->split_k > 0) split = int(std::min<int64_t>(config->split_k, k / 64));
  else split = kernel == 1 && m <= 32 ? streamChooseSplit(m, n, k) : pipelinedChooseSplit(m, n, k);
  if (work_split) *work_split = split;
  return kernel;
}

Status w3a16Gemm(const void* x, const W3A16Weights& w, void* y, int64_t m, const LowRankCompensator* comp,
                 void* workspace, int64_t workspace_bytes, Stream stream, const W3A16Config* config) {
  if (!w3a16ShapeSupported(w.n, w.k))
    return Status::failure(-1, "w3a16Gemm: n and k must be positive multiples of 64 (n=" + std::to_string(w.n) +
                                   ", k=" + std::to_string(w.k) + ")");
  if (m < 1 || m > kMaxM) return Status::failure(-1, "w3a16Gemm: batch m must be 1..64, got " + std::to_string(m));
  const int rank = comp ? comp->rank : 0;
  if (rank < 0 || rank > kMaxRank || rank % 16)
    return Status::failure(-1, "w3a16Gemm: compensator rank must be a multiple of 16 up to 128, got " + std::to_string(rank));
  if (workspace_bytes < w3a16WorkspaceBytes(w.n, rank))
    return Status::failure(-1, "w3a16Gemm: workspace of " + std::to_string(workspace_bytes) + " bytes, need " +
                                   std::to_string(w3a16WorkspaceBytes(w.n, rank)));
  const bool int3_comp = rank > 0 && comp->u3.packed;
  if (!x || !w.packed || !w.scales || !y || !workspace || (rank > 0 && !int3_comp && (!comp->u || !comp->v)))
    return Status::failure(-1, "w3a16Gemm: null pointer");
  const int kernel = chooseKernel(m, w.k, w, comp, config);
  if (kernel == 3) return launchStreamK(x, w, y, m, comp, workspace, config, detail::toCuda(stream));
  if (w.type != W3A16Type::Fp16 || int3_comp)
    return Status::failure(-1, "w3a16Gemm: bf16 activations and INT3 compensators run on the stream-K kernel only (kernel 3)");
  const cudaStream_t st = detail::toCuda(stream);
  const int nt = tilesFor(m);
  Params p{};
  p.x = static_cast<const half*>(x);
  p.w = static_cast<const uint4*>(w.packed);
  p.s = static_cast<const uint4*>(w.scales);
  p.b = static_cast<const uint4*>(w.bias);
  p.y = static_cast<half*>(y);
  p.m = int(m);
  p.n = int(w.n);
  p.k = int(w.k);
  p.rank = rank;
  p.cta_strips = int((w.n + kCtaRows - 1) / kCtaRows);
  const int groups = int(w.k / 64);
  const int split = config && config->split_k > 0 ? config->split_k : pipelinedChooseSplit(m, w.n, w.k);
  p.split_k = std::max(1, std::min(split, groups));
  char* base = static_cast<char*>(workspace);
  p.partials = reinterpret_cast<float*>(base);
  p.counters = reinterpret_cast<int*>(base + alignUp(w.n * kMaxM * 4));
  half* tbuf = reinterpret_cast<half*>(base + alignUp(w.n * kMaxM * 4) + alignUp(int64_t(p.cta_strips) * 4));
  p.t = tbuf;
  p.u = comp ? static_cast<const half*>(comp->u) : nullptr;
  p.v = comp ? static_cast<const half*>(comp->v) : nullptr;
  p.tsum = reinterpret_cast<float*>(base + alignUp(w.n * kMaxM * 4) + alignUp(int64_t(p.cta_strips) * 4) +
                                    alignUp(int64_t(kMaxM) * rank * 2));
  if (kernel == 1 && m <= 32) {
    // Streaming kernel (m <= 32): 512-row CTAs; the counters of the 256-row layout cover these.
    const int snt = streamTiles(m);
    p.cta_strips = streamCtaStrips(w.n);
    int ssplit = config && config->split_k > 0 ? std::min(config->split_k, groups) : streamChooseSplit(m, w.n, w.k);
    p.split_k = std::max(ssplit, streamMinSplit(snt, groups));
    const bool sasym = w.bias != nullptr, scomp = rank > 0;
    switch (snt) {
      case 1: return launchStream<1, 3>(p, sasym, scomp, st);
      case 2: return launchStream<2, 2>(p, sasym, scomp, st);
      default: return launchStream<4, 2>(p, sasym, scomp, st);
    }
  }
  // The compensator's X V^T is computed inside the main loop (each split its share) when the registers
  // allow it (m <= 32, rank <= 64); otherwise by a separate projection kernel before the GEMM.
  // (Overlapping that kernel with programmatic dependent launch was measured slower.)
  int comp_mode = 0;
  if (rank > 0) {
    comp_mode = (nt <= 4 && rank <= kMaxFusedRank) ? 2 : 1;
    if (comp_mode == 1) {
      lowRankProjectKernel<<<unsigned(m * rank), 128, 0, st>>>(p.x, p.v, tbuf, p.k, rank);
      MOEWB_CUDA_TRY(cudaGetLastError());
    }
  }
  const int grid = p.cta_strips * p.split_k;
  const bool asym = w.bias != nullptr;
  // 4 stages for m <= 16 (measured faster than 6 on the H200: more CTAs per SM), 6 on request.
  const bool shallow = !(config && config->stages == 6);
  // Programmatic dependent launch (sm_90): the kernel's weight prologue may overlap the tail of the
  // kernel before it in the stream; X and the scratch are touched only after that kernel completed.
  const bool overlap = deviceLimits().major >= 9 && !(config && config->overlap == 2);
  switch (nt) {
    case 1: return shallow ? launchVariant<1, 4>(p, asym, comp_mode, grid, overlap, st) : launchVariant<1, 6>(p, asym, comp_mode, grid, overlap, st);
    case 2: return shallow ? launchVariant<2, 4>(p, asym, comp_mode, grid, overlap, st) : launchVariant<2, 6>(p, asym, comp_mode, grid, overlap, st);
    case 4: return launchVariant<4, 4>(p, asym, comp_mode, grid, overlap, st);
    default: return launchVariant<8, 3>(p, asym, comp_mode, grid, overlap, st);
  }
}

Status w3a16Dequantize(const W3A16Weights& w, void* out, Stream stream) {
  if (!w3a16ShapeSupported(w.n, w.k)) return Status::failure(-1, "w3a16Dequantize: unsupported shape");
  const int64_t threads = w.n * w.k / 4096 * 32;
  const int grid = int((threads + 255) / 256);
  const cudaStream_t st = detail::toCuda(stream);
  if (w.bias)
    w3a16DequantKernel<true><<<grid, 256, 0, st>>>(static_cast<const uint4*>(w.packed), static_cast<const uint4*>(w.scales),
                                                   static_cast<const uint4*>(w.bias), static_cast<half*>(out), int(w.n), int(w.k));
  else
    w3a16DequantKernel<false><<<grid, 256, 0, st>>>(static_cast<const uint4*>(w.packed), static_cast<const uint4*>(w.scales),
                                                    nullptr, static_cast<half*>(out), int(w.n), int(w.k));
  MOEWB_CUDA_TRY(cudaGetLastError());
  return Status::success();
}

}  // namespace moewb::gpu

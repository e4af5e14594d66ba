// SPDX-License-Identifier: MIT
// moewb_ss_probe: how fast two organisations of the W3A16 block product run at m = 16 and 32 when the
// stages are already in shared memory (no global traffic; docs/benchmarks.md, round 22), per call-sized
// amount of work (4096x14336: 14336 blocks of 64x64):
//  * "sync": the stream-K kernel's own block product (w3a16_device.cuh, mma.sync, the decoded weights as
//    A fragments in registers), 8 warps per CTA, a CTA barrier per unit of 8 blocks, as in its loop.
//  * "ss": each warpgroup decodes a 64x64 block (a thread takes 32 consecutive k of one row: one scale and
//    bias) into shared memory in wgmma's canonical K-major layout, and wgmma.mma_async m64nNk16 reads both
//    operands from shared memory while the warpgroup decodes the next block (two buffers).
// Variants of "ss" leave out the wgmma or the decoder, to see which bound holds it. A diagnostic tool
// (sm_90a only): it checks the "ss" product against the decoded weights on the CPU, exits 1 on failure.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <type_traits>
#include <vector>

#include "tool_check.h"
#include "w3a16_device.cuh"

using namespace moewb::gpu::w3a16dev;

constexpr int kBlocksPerCall = 4096 * 14336 / (64 * 64);
constexpr int kStages = 3;

// ---------------------------------------------------------------------------------------------------
// "sync": the stream-K stage (8 blocks, 64 scale and 64 bias vectors, X of 4 groups in 33-vector rows).
__host__ __device__ constexpr int syncStageU4(int nt) {
  return 8 * kBlockU4 + 128 + nt * 8 * 33;
}

// kBarrier = false (diagnostic): no CTA barrier between units, the warps drift apart.
template <int NT, bool kBarrier = true>
__global__ void __launch_bounds__(256, NT <= 2 ? 2 : 1) syncProbe(const uint4* src, float* out, int units) {
  extern __shared__ uint4 smem[];
  constexpr int SU4 = syncStageU4(NT);
  for (int i = threadIdx.x; i < kStages * SU4; i += blockDim.x) smem[i] = src[i];
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
  float acc[4][NT][4];
  clearAccumulators(acc);
  for (int u = 0; u < units; ++u) {
    const uint4* st = smem + (u % kStages) * SU4;
    uint32_t wd[12];
    laneWords(st + warp * kBlockU4, lane, wd);
    const uint4* sx = st + 8 * kBlockU4 + 128 + (warp & 3) * 8;
    const uint4* bias_vector = st + 8 * kBlockU4 + 64 + warp * kScaleU4 + g;
    if constexpr (NT == 4) {
      blockProductPacked<half, NT, 33>(acc, wd, st[8 * kBlockU4 + warp * kScaleU4 + g], bias_vector, sx, lane);
    } else {
      half2 scale[8], bias[8];
      laneScaleBias<half>(st[8 * kBlockU4 + warp * kScaleU4 + g], bias_vector, scale, bias);
      blockProduct<half, NT, 33>(acc, wd, scale, bias, sx, lane);
    }
    if (kBarrier) __syncthreads();  // the loop's barrier per unit
  }
  float s = 0.f;
  forEachAccumulator(acc, lane, [&](int, int, float v) { s += v; });
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// ---------------------------------------------------------------------------------------------------
// "ss". A warpgroup's stage: the packed block as 128 vectors (thread (row r, half h) reads vector
// h * 64 + r: its three words and one of padding), then 64 rows of (scale, scale, bias, bias) as uint2
// (32 vectors). X of the stage: [8 k chunks][NT row octets] core matrices of 8 rows x 16 bytes.
constexpr int kSsPackedU4 = 128 + 32;
__host__ __device__ constexpr int ssXU4(int nt) {
  return 8 * nt * 8;
}
constexpr int kDecodedU4 = 512;  // 64 rows x 64 k fp16: [8 k chunks][8 row octets][8 rows] vectors

__device__ __forceinline__ uint64_t smemDescriptor(const void* p, int lbo, int sbo) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return uint64_t((a >> 4) & 0x3FFF) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) | (uint64_t((sbo >> 4) & 0x3FFF) << 32);
}

template <int NT>
__device__ __forceinline__ void wgmma(float (&d)[NT * 4], uint64_t da, uint64_t db);
template <>
__device__ __forceinline__ void wgmma<4>(float (&d)[16], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
      "%16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(da), "l"(db));
}
template <>
__device__ __forceinline__ void wgmma<2>(float (&d)[8], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(da), "l"(db));
}

// The 16 exact pairs of a thread's 32 weights (pair p: k 2p and 2p + 1 of its half row), scaled.
__device__ __forceinline__ void decodeHalfRow(const uint4& w, uint2 sb, uint4 (&o)[4]) {
  const half2 scale = asPair<half2>(sb.x), bias = asPair<half2>(sb.y);
  uint32_t v[16];
#pragma unroll
  for (int p = 0; p < 16; ++p) v[p] = asU32(__hfma2(decodePair<half>(p, w.x, w.y, w.z), scale, bias));
#pragma unroll
  for (int j = 0; j < 4; ++j) o[j] = make_uint4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
}

// kDecode / kMma: leave out the decoder (the buffers keep what the first block wrote) or the wgmma.
// kFence / kBarrier (diagnostic, wrong without them): leave out the proxy fence or the warpgroup barrier.
template <int NT, int WG, bool kDecode, bool kMma, bool kFence = true, bool kBarrier = true>
__global__ void __launch_bounds__(WG * 128, 1) ssProbe(const uint4* src, float* out, int blocks) {
  extern __shared__ uint4 smem[];
  uint4* packed = smem;                                   // [kStages][WG][kSsPackedU4]
  uint4* xs = packed + kStages * WG * kSsPackedU4;        // [kStages][ssXU4]
  uint4* decoded = xs + kStages * ssXU4(NT);            // [WG][2][kDecodedU4]
  const int total = kStages * (WG * kSsPackedU4 + ssXU4(NT));
  for (int i = threadIdx.x; i < total; i += blockDim.x) smem[i] = src[i];
  __syncthreads();
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128, w = t / 32, l = t % 32;
  const int row = 16 * w + (l & 15), h = l >> 4;  // a warp writes the 16 rows its part of the wgmma reads
  uint4* mine = decoded + wg * 2 * kDecodedU4;
  // Core matrix (k chunk c, row octet o) at vector (8 c + o) * 8 of a buffer: K neighbours 1024 bytes
  // apart, row neighbours 128; X's K neighbours NT * 128 apart. The descriptor's leading byte offset is
  // the K direction, as PTX documents it (the check below passes with it; exchanged, wgmma read outside
  // shared memory).
  constexpr int a_k = 1024, a_mn = 128, b_k = NT * 128, b_mn = 128;
  float acc[NT * 4];
#pragma unroll
  for (int i = 0; i < NT * 4; ++i) acc[i] = 0.f;
  if (!kDecode) {  // the buffers hold one decoded block
    uint4 o[4];
    const uint4* pk = packed + wg * kSsPackedU4;
    decodeHalfRow(pk[h * 64 + row], reinterpret_cast<const uint2*>(pk + 128)[row], o);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      mine[((4 * h + j) * 8 + row / 8) * 8 + row % 8] = o[j];
      mine[kDecodedU4 + ((4 * h + j) * 8 + row / 8) * 8 + row % 8] = o[j];
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
  }
  for (int b = 0; b < blocks; ++b) {
    const int stage = b % kStages;
    uint4* buf = mine + (b & 1) * kDecodedU4;
    if (kDecode) {
      const uint4* pk = packed + (stage * WG + wg) * kSsPackedU4;
      uint4 o[4];
      decodeHalfRow(pk[h * 64 + row], reinterpret_cast<const uint2*>(pk + 128)[row], o);
#pragma unroll
      for (int j = 0; j < 4; ++j) buf[((4 * h + j) * 8 + row / 8) * 8 + row % 8] = o[j];
      if (kFence) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      if (kBarrier) asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
    }
    if (kMma) {
      const uint4* x = xs + stage * ssXU4(NT);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int s = 0; s < 4; ++s)
        wgmma<NT>(acc, smemDescriptor(buf + s * 2 * 64, a_k, a_mn), smemDescriptor(x + s * 2 * NT * 8, b_k, b_mn));
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    } else {
      acc[0] += __half2float(reinterpret_cast<const half*>(buf)[t]);  // keeps the decoder's stores alive
    }
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  // D fragment i: row 16 w + l / 4 + 8 ((i / 2) & 1), column 8 (i / 4) + 2 (l % 4) + (i & 1).
  float* o = out + (blockIdx.x * WG + wg) * 64 * NT * 8;
#pragma unroll
  for (int i = 0; i < NT * 4; ++i)
    o[(16 * w + l / 4 + 8 * ((i / 2) & 1)) * NT * 8 + 8 * (i / 4) + 2 * (l % 4) + (i & 1)] = acc[i];
}

// The blocks the "ss" check used, decoded by the same code: [kStages][64 rows][64 k] as float.
__global__ void ssDecodeReference(const uint4* src, float* wdec) {
  const int stage = blockIdx.x, t = threadIdx.x, row = t % 64, h = t / 64;
  const uint4* pk = src + stage * kSsPackedU4;  // WG = 1
  uint4 o[4];
  decodeHalfRow(pk[h * 64 + row], reinterpret_cast<const uint2*>(pk + 128)[row], o);
  const half* v = reinterpret_cast<const half*>(o);
  for (int i = 0; i < 32; ++i) wdec[(stage * 64 + row) * 64 + 32 * h + i] = __half2float(v[i]);
}

// ---------------------------------------------------------------------------------------------------
std::vector<uint4> randomWords(size_t n, std::mt19937& rng) {
  std::vector<uint4> v(n);
  for (auto& x : v) x = make_uint4(rng(), rng(), rng(), rng());
  return v;
}
uint32_t halfPairBits(float a) {
  const half h = __float2half(a);
  const uint16_t b = *reinterpret_cast<const uint16_t*>(&h);
  return uint32_t(b) | (uint32_t(b) << 16);
}
// Scales ~U(0.005, 0.02), biases -z s with z in 0..7, X ~U(-1, 1): sane fp16 values everywhere.
void fillScalesAndX(std::vector<uint4>& v, size_t scale_at, size_t scale_u4, size_t x_at, size_t x_u4, bool ss,
                    std::mt19937& rng) {
  std::uniform_real_distribution<float> su(0.005f, 0.02f), xu(-1.f, 1.f);
  uint32_t* s = reinterpret_cast<uint32_t*>(v.data() + scale_at);
  for (size_t i = 0; i < scale_u4 * 4; i += ss ? 2 : 1) {
    const float sc = su(rng), z = float(rng() % 8);
    if (ss) {
      s[i] = halfPairBits(sc);
      s[i + 1] = halfPairBits(-z * sc);
    } else {
      s[i] = halfPairBits(sc);  // both 16-bit values of the word are scales (or biases): same magnitudes
    }
  }
  half* x = reinterpret_cast<half*>(v.data() + x_at);
  for (size_t i = 0; i < x_u4 * 8; ++i) x[i] = __float2half(xu(rng));
}

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
  }
  template <typename F>
  double perCallUs(F launch, int calls_per_launch) {
    launch();  // warm-up
    CK(cudaDeviceSynchronize());
    std::vector<float> ms(7);
    for (auto& m : ms) {
      CK(cudaEventRecord(a));
      launch();
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      CK(cudaEventElapsedTime(&m, a, b));
    }
    std::sort(ms.begin(), ms.end());
    return ms[3] * 1e3 / calls_per_launch;
  }
};

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::mt19937 rng(22);
  const int calls = 20;  // call-sized amounts of work per launch
  uint4* src = nullptr;
  float* out = nullptr;
  const size_t src_u4 = 1 << 16;
  CK(cudaMalloc(&src, src_u4 * sizeof(uint4)));
  CK(cudaMalloc(&out, size_t(4 * sms) * 512 * 64 * sizeof(float)));
  Timer timer;
  bool ok = true;

  // The "ss" check: one CTA, one warpgroup, three blocks (one per stage).
  for (int nt : {2, 4}) {
    const int xu4 = ssXU4(nt);
    auto words = randomWords(kStages * (kSsPackedU4 + xu4), rng);
    for (int st = 0; st < kStages; ++st) fillScalesAndX(words, st * kSsPackedU4 + 128, 32, 0, 0, true, rng);
    fillScalesAndX(words, 0, 0, kStages * kSsPackedU4, kStages * xu4, true, rng);
    CK(cudaMemcpy(src, words.data(), words.size() * sizeof(uint4), cudaMemcpyHostToDevice));
    float* wdec = nullptr;
    CK(cudaMalloc(&wdec, kStages * 64 * 64 * sizeof(float)));
    ssDecodeReference<<<kStages, 128>>>(src, wdec);
    std::vector<float> w(kStages * 64 * 64);
    CK(cudaMemcpy(w.data(), wdec, w.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaFree(wdec));
    // X element (row n, k) of stage st: core matrix (k / 8, n / 8), row n % 8, element k % 8.
    const half* xh = reinterpret_cast<const half*>(words.data() + kStages * kSsPackedU4);
    const int mp = nt * 8;
    std::vector<double> ref(64 * mp, 0.0);
    for (int st = 0; st < kStages; ++st)
      for (int r = 0; r < 64; ++r)
        for (int n = 0; n < mp; ++n)
          for (int k = 0; k < 64; ++k) {
            const size_t e = size_t(st) * xu4 * 8 + ((k / 8) * nt + n / 8) * 64 + (n % 8) * 8 + k % 8;
            ref[r * mp + n] += double(w[(st * 64 + r) * 64 + k]) * double(__half2float(xh[e]));
          }
    const size_t bytes = (kStages * (kSsPackedU4 + xu4) + 2 * kDecodedU4) * sizeof(uint4);
    auto* kernel = nt == 2 ? ssProbe<2, 1, true, true> : ssProbe<4, 1, true, true>;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    kernel<<<1, 128, bytes>>>(src, out, kStages);
    CK(cudaDeviceSynchronize());
    std::vector<float> got(64 * mp);
    CK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (int i = 0; i < 64 * mp; ++i) {
      num += (got[i] - ref[i]) * (got[i] - ref[i]);
      den += ref[i] * ref[i];
    }
    const double err = std::sqrt(num / den);
    std::printf("check ss m=%d: normalised error %.3g against the decoded weights\n", mp, err);
    if (!(err < 1e-4)) {  // fp32 sums of exact fp16 products: ~1e-7
      std::printf("FAIL: the wgmma product does not match\n");
      ok = false;
    }
  }

  // Timings: each row fills src with random words and sane scales and X, everything its kernel reads.
  auto fill_sync = [&](int nt) {
    auto v = randomWords(src_u4, rng);
    const int su4 = syncStageU4(nt);
    for (int st = 0; st < kStages; ++st)
      fillScalesAndX(v, st * su4 + 8 * kBlockU4, 128, st * su4 + 8 * kBlockU4 + 128, nt * 8 * 33, false, rng);
    CK(cudaMemcpy(src, v.data(), v.size() * sizeof(uint4), cudaMemcpyHostToDevice));
  };
  auto fill_ss = [&](int nt, int wg) {
    auto v = randomWords(src_u4, rng);
    const int xu4 = ssXU4(nt);
    for (int i = 0; i < kStages * wg; ++i) fillScalesAndX(v, i * kSsPackedU4 + 128, 32, 0, 0, true, rng);
    fillScalesAndX(v, 0, 0, kStages * wg * kSsPackedU4, kStages * xu4, true, rng);
    CK(cudaMemcpy(src, v.data(), v.size() * sizeof(uint4), cudaMemcpyHostToDevice));
  };
  std::printf("\n| organisation | m | CTAs per SM | warps per SM | us per call (product only) |\n|---|---|---|---|---|\n");
  auto sync_row = [&](auto kernel, int nt, const char* what = "") {
    fill_sync(nt);
    const int per_sm = nt <= 2 ? 2 : 1, grid = sms * per_sm;
    const int units = (calls * kBlocksPerCall + 8 * grid - 1) / (8 * grid);
    const size_t bytes = kStages * syncStageU4(nt) * sizeof(uint4);
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    const double us = timer.perCallUs([&] { kernel<<<grid, 256, bytes>>>(src, out, units); }, calls);
    CK(cudaGetLastError());
    std::printf("| sync (stream-K block product)%s | %d | %d | %d | %.2f |\n", what, nt * 8, per_sm, 8 * per_sm, us);
  };
  sync_row(syncProbe<2>, 2);
  sync_row(syncProbe<4>, 4);
  sync_row(syncProbe<2, false>, 2, ", no barrier");
  sync_row(syncProbe<4, false>, 4, ", no barrier");
  auto ss_row = [&](auto kernel, int nt, int wg, int per_sm, const char* what) {
    fill_ss(nt, wg);
    const int grid = sms * per_sm;
    const int blocks = (calls * kBlocksPerCall + wg * grid - 1) / (wg * grid);
    const int xu4 = ssXU4(nt);
    const size_t bytes = (kStages * (wg * kSsPackedU4 + xu4) + wg * 2 * kDecodedU4) * sizeof(uint4);
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    const double us = timer.perCallUs([&] { kernel<<<grid, wg * 128, bytes>>>(src, out, blocks); }, calls);
    CK(cudaGetLastError());
    int resident = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, wg * 128, bytes));
    std::printf("| ss%s | %d | %d (%d resident) | %d | %.2f |\n", what, nt * 8, per_sm, resident, 4 * wg * per_sm, us);
  };
  // The rows of one batch tile: 2 or 4 warpgroups per CTA at 1 or 2 CTAs per SM, then the variants.
  auto ss_rows = [&](auto nt_constant) {
    constexpr int NT = decltype(nt_constant)::value;
    ss_row(ssProbe<NT, 2, true, true>, NT, 2, 1, "");
    ss_row(ssProbe<NT, 4, true, true>, NT, 4, 1, "");
    ss_row(ssProbe<NT, 2, true, true>, NT, 2, 2, "");
    ss_row(ssProbe<NT, 4, true, true>, NT, 4, 2, "");
    ss_row(ssProbe<NT, 4, false, true>, NT, 4, 1, ": wgmma only");
    ss_row(ssProbe<NT, 4, true, false>, NT, 4, 1, ": decoder only");
    if constexpr (NT == 2) {  // what the decoder's synchronisation costs (measured at m = 16 only)
      ss_row(ssProbe<NT, 4, true, false, false, true>, NT, 4, 1, ": decoder only, no fence");
      ss_row(ssProbe<NT, 4, true, false, true, false>, NT, 4, 1, ": decoder only, no barrier");
      ss_row(ssProbe<NT, 4, true, false, false, false>, NT, 4, 1, ": decoder only, neither");
    }
    ss_row(ssProbe<NT, 4, true, true, false, true>, NT, 4, 1, ": no fence (wrong values)");
    ss_row(ssProbe<NT, 4, true, true, false, true>, NT, 4, 2, ": no fence (wrong values)");
  };
  ss_rows(std::integral_constant<int, 2>{});
  ss_rows(std::integral_constant<int, 4>{});
  CK(cudaFree(src));
  CK(cudaFree(out));
  return ok ? 0 : 1;
}

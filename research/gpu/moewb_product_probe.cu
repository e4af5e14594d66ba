// SPDX-License-Identifier: MIT
// moewb_product_probe: what bounds the W3A16 block product at m = 16 and 32 (docs/benchmarks.md, round
// 26). Like moewb_ss_probe, every row runs on stages already in shared memory (no global traffic), 20
// calls' worth of 4096x14336 (14336 blocks of 64x64) per launch, a CTA barrier per unit:
//  * "mma.sync": the stream-K kernel's block product (blockProduct / blockProductPacked of
//    w3a16_device.cuh) at its own occupancy and at more warps per SM (2 CTAs of 8 warps in 128 registers,
//    CTAs of 12 and 16 warps); and its loop with parts left out: no decoder (A = the raw words), neither
//    decoder nor ldmatrix (B fixed in registers).
//  * "wgmma RS": wgmma.mma_async m64nNk16 with the decoded weights as A from registers and X from shared
//    memory, in a layout made for it: warp w of a warpgroup holds row tile w of the unit's four blocks
//    (its lane's 12 words, 3 per block, in three 16-byte loads), one descriptor word per wgmma computed
//    by an add; the warpgroup decodes group c + 1 while the 4 wgmma of group c run. Round 12's version
//    in the kernel read 3 of 12 words from each of 4 blocks and moved descriptors per wgmma.
// A diagnostic tool (sm_90a): it checks the wgmma product against the decoded weights on the CPU and exits
// 1 on a mismatch or a CUDA error.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "tool_check.h"
#include "w3a16_device.cuh"

using namespace moewb::gpu::w3a16dev;

namespace {

constexpr int kBlocksPerCall = 4096 * 14336 / (64 * 64);
constexpr int kStages = 3;
constexpr int kCalls = 20;  // call-sized amounts of work per launch

// ---------------------------------------------------------------------------------------------------
// mma.sync. A stage: WARPS blocks, their scales and biases, X of 4 groups in 33-vector rows (the
// stream-K stage for WARPS = 8).
__host__ __device__ constexpr int syncStageU4(int nt, int warps) {
  return warps * kBlockU4 + 2 * warps * kScaleU4 + nt * 8 * 33;
}

enum class Leave { kNothing, kDecoder, kDecoderAndLdmatrix };

// The block product with parts left out: blockProductWith's loop, its A registers taken straight from
// the words (no decoder), and B either from ldmatrix or fixed in registers.
template <int NT, Leave kLeave>
__device__ __forceinline__ void partialProduct(float (&acc)[4][NT][4], const uint32_t (&wd)[12], const uint4* sx, int lane,
                                               const uint32_t (&b_fixed)[NT][2]) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    uint32_t b[NT][2];
    if constexpr (kLeave == Leave::kDecoderAndLdmatrix) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        b[j][0] = b_fixed[j][0] ^ s;
        b[j][1] = b_fixed[j][1];
      }
    } else {
      loadB<NT, 33>(b, sx, s, lane);
    }
#pragma unroll
    for (int rt = 0; rt < 4; ++rt) {
      uint32_t a[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) a[r] = wd[3 * rt + (r + s) % 3];  // the raw words: same registers, no decoder
#pragma unroll
      for (int j = 0; j < NT; ++j) mma16816<half>(acc[rt][j], a, b[j][0], b[j][1]);
    }
  }
}

template <int NT, int WARPS, int MIN_CTAS, Leave kLeave>
__global__ void __launch_bounds__(WARPS * 32, MIN_CTAS) syncProbe(const uint4* src, float* out, int units) {
  extern __shared__ uint4 smem[];
  constexpr int SU4 = syncStageU4(NT, WARPS);
  for (int i = threadIdx.x; i < kStages * SU4; i += blockDim.x) smem[i] = src[i];
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
  float acc[4][NT][4];
  clearAccumulators(acc);
  uint32_t b_fixed[NT][2];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    b_fixed[j][0] = 0x3C003C00u ^ (lane * 77 + j);
    b_fixed[j][1] = 0x3C003C00u ^ (lane * 13 + j);
  }
  for (int u = 0; u < units; ++u) {
    const uint4* st = smem + (u % kStages) * SU4;
    uint32_t wd[12];
    laneWords(st + warp * kBlockU4, lane, wd);
    const uint4* scales = st + WARPS * kBlockU4;
    const uint4* sx = scales + 2 * WARPS * kScaleU4 + (warp & 3) * 8;
    if constexpr (kLeave != Leave::kNothing) {
      partialProduct<NT, kLeave>(acc, wd, sx, lane, b_fixed);
    } else if constexpr (NT == 4) {  // the kernel's product at m = 17..32: scales kept packed
      blockProductPacked<half, NT, 33>(acc, wd, scales[warp * kScaleU4 + g], scales + (WARPS + warp) * kScaleU4 + g, sx, lane);
    } else {  // at m = 9..16: scales broadcast once per block
      half2 scale[8], bias[8];
      laneScaleBias<half>(scales[warp * kScaleU4 + g], scales + (WARPS + warp) * kScaleU4 + g, scale, bias);
      blockProduct<half, NT, 33>(acc, wd, scale, bias, sx, lane);
    }
    __syncthreads();
  }
  float s = 0.f;
  forEachAccumulator(acc, lane, [&](int, int, float v) { s += v; });
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// ---------------------------------------------------------------------------------------------------
// wgmma RS. A warpgroup's stage (64 rows x 256 k): words [4 warps][3 vectors][32 lanes], scales and
// biases [4 warps][8 lane groups][2 vectors: 8 scales, 8 biases (group c, row g + 8h at 2c + h)], X as
// [4 groups][8 k chunks][NT row octets] core matrices of 8 rows x 16 bytes (as moewb_ss_probe's "ss").
constexpr int kRsWordsU4 = 384, kRsScalesU4 = 64;
__host__ __device__ constexpr int rsXU4(int nt) { return 4 * 8 * nt * 8; }
__host__ __device__ constexpr int rsStageU4(int nt) { return kRsWordsU4 + kRsScalesU4 + rsXU4(nt); }

template <int NT>
__device__ __forceinline__ void wgmmaRS(float (&d)[NT * 4], const uint32_t (&a)[4], uint32_t desc_lo, uint32_t desc_hi);
template <>
__device__ __forceinline__ void wgmmaRS<4>(float (&d)[16], const uint32_t (&a)[4], uint32_t desc_lo, uint32_t desc_hi) {
  asm volatile(
      "{\n.reg .b64 desc;\nmov.b64 desc, {%20, %21};\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
      "{%16,%17,%18,%19}, desc, 1, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_lo), "r"(desc_hi));
}
template <>
__device__ __forceinline__ void wgmmaRS<2>(float (&d)[8], const uint32_t (&a)[4], uint32_t desc_lo, uint32_t desc_hi) {
  asm volatile(
      "{\n.reg .b64 desc;\nmov.b64 desc, {%12, %13};\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, desc, 1, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_lo), "r"(desc_hi));
}

// The lane's A fragments of one group's 4 k steps (its warp's row tile), scaled: the exact-pair decoder.
// sc / bi: the word holding the scales (biases) of rows g (low half) and g + 8 (high half).
__device__ __forceinline__ void rsDecodeGroup(uint32_t (&a)[4][4], const uint32_t* w, uint32_t sc, uint32_t bi) {
  auto broadcast = [](uint32_t v, int h) { return asPair<half2>(__byte_perm(v, v, h ? 0x3232 : 0x1010)); };
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      a[s][r] = asU32(__hfma2(decodePair<half>(4 * s + r, w[0], w[1], w[2]), broadcast(sc, r & 1), broadcast(bi, r & 1)));
}

__device__ __forceinline__ void rsLaneWords(const uint4* stage, int warp, int lane, uint32_t (&wd)[12]) {
  const uint4* v = stage + warp * 3 * 32 + lane;
  const uint4 v0 = v[0], v1 = v[32], v2 = v[64];
  const uint32_t w[12] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w, v2.x, v2.y, v2.z, v2.w};
#pragma unroll
  for (int i = 0; i < 12; ++i) wd[i] = w[i];
}

// kMma = false: the decoder alone, its fragments folded into one register by XOR (4 LOP3 per k step more)
// so that it is not optimised away. units == 1: the check, which stores the D fragments.
template <int NT, int WG, int MIN_CTAS, bool kMma>
__global__ void __launch_bounds__(WG * 128, MIN_CTAS) rsProbe(const uint4* src, float* out, int units) {
  extern __shared__ uint4 smem[];
  constexpr int SU4 = rsStageU4(NT);
  for (int i = threadIdx.x; i < kStages * WG * SU4; i += blockDim.x) smem[i] = src[i];
  __syncthreads();
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane / 4;
  float acc[NT * 4];
#pragma unroll
  for (int i = 0; i < NT * 4; ++i) acc[i] = 0.f;
  uint32_t fold = 0;
  // Matrix descriptor of X: start address / 16 in bits 0..13, leading byte offset (K direction, NT core
  // matrices of 128 bytes) / 16 in bits 16..29; stride byte offset (N direction, 128 bytes) / 16 in the
  // high word. Adding a k step's offset / 16 to the low word moves the start (shared memory < 256 KB).
  const uint32_t smem_base = (static_cast<uint32_t>(__cvta_generic_to_shared(smem)) >> 4) & 0x3FFF;
  const uint32_t desc_lbo = uint32_t((NT * 128) >> 4) << 16, desc_hi = 128 >> 4;
  for (int u = 0; u < units; ++u) {
    const int slot = (u % kStages) * WG + wg;
    const uint4* st = smem + slot * SU4;
    uint32_t wd[12];
    rsLaneWords(st, warp, lane, wd);
    const uint4 sv = st[kRsWordsU4 + (warp * 8 + g) * 2], bv = st[kRsWordsU4 + (warp * 8 + g) * 2 + 1];
    const uint32_t sw[4] = {sv.x, sv.y, sv.z, sv.w}, bw[4] = {bv.x, bv.y, bv.z, bv.w};
    const uint32_t x_desc = desc_lbo | (smem_base + uint32_t(slot * SU4 + kRsWordsU4 + kRsScalesU4));
    uint32_t a[2][4][4];  // two groups' fragments: one decoded while the other's wgmma run
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      rsDecodeGroup(a[c & 1], wd + 3 * c, sw[c], bw[c]);
      if constexpr (kMma) {
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int s = 0; s < 4; ++s) wgmmaRS<NT>(acc, a[c & 1][s], x_desc + (c * 8 + 2 * s) * NT * 8, desc_hi);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // group c - 1 done: its registers free
      } else {
#pragma unroll
        for (int s = 0; s < 4; ++s) fold ^= a[c & 1][s][0] ^ a[c & 1][s][1] ^ a[c & 1][s][2] ^ a[c & 1][s][3];
      }
    }
    __syncthreads();
  }
  if constexpr (kMma) asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  if (units == 1) {  // D fragment i: row 16 warp + g + 8 ((i / 2) & 1), column 8 (i / 4) + 2 (lane % 4) + (i & 1)
#pragma unroll
    for (int i = 0; i < NT * 4; ++i)
      out[(wg * 64 + 16 * warp + g + 8 * ((i / 2) & 1)) * NT * 8 + 8 * (i / 4) + 2 * (lane % 4) + (i & 1)] = acc[i];
    return;
  }
  float s = __uint_as_float(fold & 0x3FFFFFFFu);
#pragma unroll
  for (int i = 0; i < NT * 4; ++i) s += acc[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// The decoded weights of the first warpgroup stage, [64 rows][256 k] as float, by the same decoder.
__global__ void rsDecodeReference(const uint4* src, float* wdec) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint32_t wd[12];
  rsLaneWords(src, warp, lane, wd);
  const uint4 sv = src[kRsWordsU4 + (warp * 8 + g) * 2], bv = src[kRsWordsU4 + (warp * 8 + g) * 2 + 1];
  const uint32_t sw[4] = {sv.x, sv.y, sv.z, sv.w}, bw[4] = {bv.x, bv.y, bv.z, bv.w};
  for (int c = 0; c < 4; ++c) {
    uint32_t a[4][4];
    rsDecodeGroup(a, wd + 3 * c, sw[c], bw[c]);
    for (int s = 0; s < 4; ++s)
      for (int r = 0; r < 4; ++r) {
        const half2 h = asPair<half2>(a[s][r]);
        const int row = 16 * warp + g + 8 * (r & 1), k = 64 * c + 16 * s + 2 * t + 8 * (r >> 1);
        wdec[row * 256 + k] = __low2float(h);
        wdec[row * 256 + k + 1] = __high2float(h);
      }
  }
}

// ---------------------------------------------------------------------------------------------------
uint16_t halfBits(float f) {
  const half h = __float2half(f);
  return *reinterpret_cast<const uint16_t*>(&h);
}
float halfValue(uint16_t b) {
  half h;
  *reinterpret_cast<uint16_t*>(&h) = b;
  return __half2float(h);
}

struct Probe {
  int sms = 0;
  std::mt19937 rng{26};
  size_t src_u4 = size_t(1) << 16;
  uint4* src = nullptr;
  float* out = nullptr;
  cudaEvent_t start{}, stop{};

  Probe() {
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaMalloc(&src, src_u4 * sizeof(uint4)));
    CK(cudaMalloc(&out, size_t(4 * sms) * 1024 * sizeof(float)));
    CK(cudaEventCreate(&start));
    CK(cudaEventCreate(&stop));
  }
  ~Probe() {
    cudaFree(src);
    cudaFree(out);
  }
  // mma.sync rows: every 16-bit value a finite fp16 in ±[0.5, 1) (the words too: the decoder takes any
  // bits), so that no row times arithmetic on NaN or infinity.
  void fillSync() {
    std::vector<uint16_t> v(src_u4 * 8);
    for (auto& h : v) h = uint16_t((rng() & 0x83FFu) | 0x3800u);
    CK(cudaMemcpy(src, v.data(), v.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
  }
  // wgmma RS rows: random words, each scale ~U(0.005, 0.02) with its bias -z s (z in 0..7), X ~U(-1, 1).
  std::vector<uint4> fillRs(int nt, int stages) {
    std::vector<uint4> v(src_u4);
    for (auto& x : v) x = make_uint4(rng(), rng(), rng(), rng());
    std::uniform_real_distribution<float> su(0.005f, 0.02f), xu(-1.f, 1.f);
    for (int st = 0; st < stages; ++st) {
      uint4* stage = v.data() + size_t(st) * rsStageU4(nt);
      uint16_t* sb = reinterpret_cast<uint16_t*>(stage + kRsWordsU4);
      for (int i = 0; i < kRsScalesU4 * 8; i += 16)
        for (int j = 0; j < 8; ++j) {
          const float s = su(rng), z = float(rng() % 8);
          sb[i + j] = halfBits(s);
          sb[i + 8 + j] = halfBits(-z * s);
        }
      uint16_t* x = reinterpret_cast<uint16_t*>(stage + kRsWordsU4 + kRsScalesU4);
      for (int i = 0; i < rsXU4(nt) * 8; ++i) x[i] = halfBits(xu(rng));
    }
    CK(cudaMemcpy(src, v.data(), v.size() * sizeof(uint4), cudaMemcpyHostToDevice));
    return v;
  }
  template <typename Kernel>
  void row(Kernel kernel, const char* what, int m, int threads, int ctas_per_sm, size_t smem_bytes, int units) {
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes)));
    int resident = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, threads, smem_bytes));
    if (resident < ctas_per_sm) {
      std::printf("| %s | %d | %d x %d warps: only %d CTAs fit | | |\n", what, m, ctas_per_sm, threads / 32, resident);
      return;
    }
    const int grid = sms * ctas_per_sm;
    kernel<<<grid, threads, smem_bytes>>>(src, out, units);  // warm-up
    CK(cudaDeviceSynchronize());
    std::vector<float> ms(7);
    for (auto& t : ms) {
      CK(cudaEventRecord(start));
      kernel<<<grid, threads, smem_bytes>>>(src, out, units);
      CK(cudaEventRecord(stop));
      CK(cudaEventSynchronize(stop));
      CK(cudaEventElapsedTime(&t, start, stop));
    }
    CK(cudaGetLastError());
    std::sort(ms.begin(), ms.end());
    cudaFuncAttributes fa{};
    CK(cudaFuncGetAttributes(&fa, kernel));
    std::printf("| %s | %d | %d x %d warps | %d (%zu B spilled) | %.2f |\n", what, m, ctas_per_sm, threads / 32, fa.numRegs,
                size_t(fa.localSizeBytes), ms[3] * 1e3 / kCalls);
  }
  template <int NT, int WARPS, int MIN_CTAS, Leave kLeave>
  void syncRow(const char* what) {
    fillSync();
    const int grid = sms * MIN_CTAS;
    const int units = (kCalls * kBlocksPerCall + WARPS * grid - 1) / (WARPS * grid);
    row(syncProbe<NT, WARPS, MIN_CTAS, kLeave>, what, NT * 8, WARPS * 32, MIN_CTAS,
        kStages * syncStageU4(NT, WARPS) * sizeof(uint4), units);
  }
  template <int NT, int WG, int MIN_CTAS, bool kMma>
  void rsRow(const char* what) {
    fillRs(NT, kStages * WG);
    const int grid = sms * MIN_CTAS;
    const int units = (kCalls * kBlocksPerCall / 4 + WG * grid - 1) / (WG * grid);
    row(rsProbe<NT, WG, MIN_CTAS, kMma>, what, NT * 8, WG * 128, MIN_CTAS, kStages * WG * rsStageU4(NT) * sizeof(uint4), units);
  }
  // One warpgroup, one stage: the wgmma product against the decoded weights times X in double.
  template <int NT>
  bool checkRs() {
    const auto v = fillRs(NT, kStages);
    float* wdec = nullptr;
    CK(cudaMalloc(&wdec, 64 * 256 * sizeof(float)));
    rsDecodeReference<<<1, 128>>>(src, wdec);
    std::vector<float> w(64 * 256);
    CK(cudaMemcpy(w.data(), wdec, w.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaFree(wdec));
    const size_t bytes = kStages * rsStageU4(NT) * sizeof(uint4);
    CK(cudaFuncSetAttribute(rsProbe<NT, 1, 1, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    rsProbe<NT, 1, 1, true><<<1, 128, bytes>>>(src, out, 1);
    CK(cudaDeviceSynchronize());
    const int mp = NT * 8;
    std::vector<float> got(64 * mp);
    CK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    const uint16_t* x = reinterpret_cast<const uint16_t*>(v.data() + kRsWordsU4 + kRsScalesU4);
    double num = 0, den = 0;
    for (int r = 0; r < 64; ++r)
      for (int n = 0; n < mp; ++n) {
        double ref = 0;
        for (int k = 0; k < 256; ++k) {
          const int c = k / 64, kk = k % 64;  // X element (row n, k): group c, core matrix (kk / 8, n / 8)
          const size_t e = size_t(c) * 8 * NT * 64 + ((kk / 8) * NT + n / 8) * 64 + (n % 8) * 8 + kk % 8;
          ref += double(w[r * 256 + k]) * double(halfValue(x[e]));
        }
        num += (got[r * mp + n] - ref) * (got[r * mp + n] - ref);
        den += ref * ref;
      }
    const double err = std::sqrt(num / den);
    std::printf("check wgmma RS m=%d: normalised error %.3g against the decoded weights\n", mp, err);
    return err < 1e-4;  // fp32 sums of exact fp16 products: ~1e-7
  }
};

}  // namespace

int main() {
  Probe p;
  bool ok = p.checkRs<2>();
  ok = p.checkRs<4>() && ok;
  std::printf("\n| organisation | m | CTAs per SM x warps | registers | us per call (product only) |\n|---|---|---|---|---|\n");
  p.syncRow<2, 8, 2, Leave::kNothing>("mma.sync (the kernel's)");
  p.syncRow<2, 8, 2, Leave::kDecoder>("mma.sync, no decoder");
  p.syncRow<2, 8, 2, Leave::kDecoderAndLdmatrix>("mma.sync, neither decoder nor ldmatrix");
  p.rsRow<2, 2, 2, true>("wgmma RS");
  p.rsRow<2, 2, 2, false>("wgmma RS: its decoder only");
  p.syncRow<4, 8, 1, Leave::kNothing>("mma.sync (the kernel's)");
  p.syncRow<4, 8, 2, Leave::kNothing>("mma.sync, 128 registers");
  p.syncRow<4, 12, 1, Leave::kNothing>("mma.sync");
  p.syncRow<4, 16, 1, Leave::kNothing>("mma.sync");
  p.syncRow<4, 8, 1, Leave::kDecoder>("mma.sync, no decoder");
  p.syncRow<4, 8, 1, Leave::kDecoderAndLdmatrix>("mma.sync, neither decoder nor ldmatrix");
  p.rsRow<4, 2, 1, true>("wgmma RS");
  p.rsRow<4, 2, 1, false>("wgmma RS: its decoder only");
  return ok ? 0 : 1;
}

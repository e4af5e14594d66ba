// SPDX-License-Identifier: MIT
#pragma once
// Device helpers of the W3A16 kernels (the stream-K GEMM in w3a16_streamk.cu, the dequantize kernel in
// w3a16_gemm.cu): cp.async, the INT3 decoder, mma.sync and ldmatrix wrappers, for fp16 and bf16
// activations. Layout: docs/w3a16-kernel.md.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "moewb/gpu/int3_layout.h"

namespace moewb::gpu::w3a16dev {

constexpr int kBlockU4 = 96;  // 16-byte vectors per 64x64 weight block (1536 B)
constexpr int kScaleU4 = 8;   // 16-byte vectors of scales per block (and of biases)

// The activation type's constants. Both decoders put a 3-bit field into the mantissa of a "magic"
// number whose unit in the last place is 1 (fp16 1024, bf16 128), so the field reads as an integer.
template <typename T>
struct Act;
template <>
struct Act<half> {
  using T2 = half2;
  static constexpr uint32_t kMagic = 0x64006400u;  // 1024, 1024
  static constexpr uint32_t kEighth = 0x30003000u, kMinusMagicEighth = 0xD800D800u;  // 1/8, -128
  static constexpr uint32_t kMinusMagic = 0xE400E400u, kOne = 0x3C003C00u, kEight = 0x48004800u;
  static constexpr uint32_t kSixtyFourth = 0x24002400u, kSixtyFour = 0x54005400u;
  static __device__ __forceinline__ T2 fma2(T2 a, T2 b, T2 c) { return __hfma2(a, b, c); }
  static __device__ __forceinline__ T2 sub2(T2 a, T2 b) { return __hsub2(a, b); }
  static __device__ __forceinline__ T2 mul2(T2 a, T2 b) { return __hmul2(a, b); }
  static __device__ __forceinline__ T2 broadcast(half v) { return __half2half2(v); }
  static __device__ __forceinline__ half fromFloat(float v) { return __float2half_rn(v); }
  static __device__ __forceinline__ T2 fromFloats(float lo, float hi) { return __floats2half2_rn(lo, hi); }
  static __device__ __forceinline__ float toFloat(half v) { return __half2float(v); }
  static __device__ __forceinline__ half fromBits(unsigned short b) { return __ushort_as_half(b); }
};
template <>
struct Act<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  static constexpr uint32_t kMagic = 0x43004300u;  // 128, 128
  static constexpr uint32_t kEighth = 0x3E003E00u, kMinusMagicEighth = 0xC180C180u;  // 1/8, -16
  static constexpr uint32_t kMinusMagic = 0xC300C300u, kOne = 0x3F803F80u, kEight = 0x41004100u;
  static constexpr uint32_t kSixtyFourth = 0x3C803C80u, kSixtyFour = 0x42804280u;  // unused: bf16 has no weight 64
  static __device__ __forceinline__ T2 fma2(T2 a, T2 b, T2 c) { return __hfma2(a, b, c); }
  static __device__ __forceinline__ T2 sub2(T2 a, T2 b) { return __hsub2(a, b); }
  static __device__ __forceinline__ T2 mul2(T2 a, T2 b) { return __hmul2(a, b); }
  static __device__ __forceinline__ T2 broadcast(__nv_bfloat16 v) { return __bfloat162bfloat162(v); }
  static __device__ __forceinline__ __nv_bfloat16 fromFloat(float v) { return __float2bfloat16_rn(v); }
  static __device__ __forceinline__ T2 fromFloats(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
  static __device__ __forceinline__ float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 fromBits(unsigned short b) { return __ushort_as_bfloat16(b); }
};

template <typename T2>
__device__ __forceinline__ T2 asPair(uint32_t v) {
  return *reinterpret_cast<T2*>(&v);
}
template <typename T2>
__device__ __forceinline__ uint32_t asU32(T2 v) {
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ void cpAsync16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;  // 0 bytes read = the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes));
}
// Weights are read exactly once per call: ask L2 to evict them first so X and the scratch stay cached.
__device__ __forceinline__ void cpAsync16Stream(void* smem, const void* gmem, uint64_t policy) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "l"(policy));
}
__device__ __forceinline__ uint64_t evictFirstPolicy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void prefetchL2(const void* gmem) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(gmem));
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ uint32_t lop3AndOr(uint32_t a, uint32_t b, uint32_t c) {
  // (a & b) | c: LUT = (0xF0 & 0xCC) | 0xAA = 0xEA
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// Pair p (0..15) of a row tile's three words, with the magic number still in: both halves hold
// magic + E q, where E = fieldWeight<T>(pairField(p)) (fp16 1, 8, 64; bf16 1, 8, 1). After unrolling, p is
// a constant and every branch folds away. fp16 reads the fields at bits 0, 3 and 6 of each half in place;
// bf16 has only 7 mantissa bits, so its field at bit 6 is shifted down first. The spare-bit pair (slot
// 15) is assembled in the field-2 position of the type.
template <typename T>
__host__ __device__ constexpr int fieldWeight(int field) {
  return field == 0 ? 1 : (field == 1 ? 8 : (Act<T>::kMagic == 0x64006400u ? 64 : 1));
}
template <typename T>
__device__ __forceinline__ uint32_t decodeRaw(int p, uint32_t w0, uint32_t w1, uint32_t w2) {
  constexpr uint32_t magic = Act<T>::kMagic;
  constexpr bool fp16 = magic == 0x64006400u;
  const int slot = pairSlot(p);
  if (slot == 15) {
    if (fp16) {
      const uint32_t a = lop3AndOr(w0 >> 9, 0x00400040u, magic);
      return lop3AndOr(w2 >> 7, 0x01000100u, lop3AndOr(w1 >> 8, 0x00800080u, a));
    }
    const uint32_t a = lop3AndOr(w0 >> 15, 0x00010001u, magic);
    return lop3AndOr(w2 >> 13, 0x00040004u, lop3AndOr(w1 >> 14, 0x00020002u, a));
  }
  const int wi = slot / 5, i = slot % 5;
  const uint32_t w = wi == 0 ? w0 : (wi == 1 ? w1 : w2);
  const uint32_t src = i >= 3 ? (w >> 9) : w;
  const int f = i % 3;  // value at bit 3f of each half
  if (f == 0) return lop3AndOr(src, 0x00070007u, magic);
  if (f == 1) return lop3AndOr(src, 0x00380038u, magic);
  return fp16 ? lop3AndOr(src, 0x01C001C0u, magic) : lop3AndOr(src >> 6, 0x00070007u, magic);
}
// The exact pair (q_lo, q_hi) in T: (magic + E q) / E - magic / E, one sub or fma. Constants are bit
// patterns so that they become immediates of the FMA instead of conversions.
template <typename T>
__device__ __forceinline__ typename Act<T>::T2 decodePair(int p, uint32_t w0, uint32_t w1, uint32_t w2) {
  using A = Act<T>;
  using T2 = typename A::T2;
  const uint32_t raw = decodeRaw<T>(p, w0, w1, w2);
  const int e = fieldWeight<T>(pairField(p));
  if (e == 1) return A::sub2(asPair<T2>(raw), asPair<T2>(A::kMagic));
  if (e == 8) return A::fma2(asPair<T2>(raw), asPair<T2>(A::kEighth), asPair<T2>(A::kMinusMagicEighth));
  return A::fma2(asPair<T2>(raw), asPair<T2>(A::kSixtyFourth), asPair<T2>(0xCC00CC00u));  // fp16 only: -16
}

template <typename T>
__device__ __forceinline__ void mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<half>(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d = a * b + c with c in other registers than d (a chain seeded from a shared value without copies).
template <typename T>
__device__ __forceinline__ void mma16816From(float* d, const uint32_t* a, uint32_t b0, uint32_t b1, const float* c);
template <>
__device__ __forceinline__ void mma16816From<half>(float* d, const uint32_t* a, uint32_t b0, uint32_t b1, const float* c) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
template <>
__device__ __forceinline__ void mma16816From<__nv_bfloat16>(float* d, const uint32_t* a, uint32_t b0, uint32_t b1,
                                                             const float* c) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

__device__ __forceinline__ void ldmatrixX4(uint32_t* r, const void* smem) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrixX2(uint32_t* r, const void* smem) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}

// Where a staged X tile of [nt*8 rows][8 16-byte chunks] of 16-bit values keeps chunk c of row mm (in
// vectors from the tile's start), by its row pitch kXRow: 8, swizzled (chunk c at c ^ (mm & 7)), or an odd
// number of vectors, padded (the stream-K kernel's 33: a row holds four groups' tiles, 8 vectors apart, and
// one vector of padding). Either way the 8 rows that one ldmatrix reads lie in distinct banks; with the
// padded rows a lane's addresses for the four k steps differ by constants, which saved the stream-K kernel
// recomputing them per block.
template <int kXRow>
__host__ __device__ constexpr int xChunk(int mm, int c) {
  static_assert(kXRow == 8 || kXRow % 2 == 1, "X rows are 8 swizzled or an odd number of padded vectors");
  return mm * kXRow + (kXRow == 8 ? (c ^ (mm & 7)) : c);
}

// B fragments (k16 step s, all n8 tiles) from a staged X tile (xChunk<kXRow>).
template <int NT, int kXRow = 8>
__device__ __forceinline__ void loadB(uint32_t (&b)[NT][2], const uint4* sx, int s, int lane) {
  if constexpr (NT == 1) {
    const int mm = lane & 7, c = 2 * s + ((lane >> 3) & 1);
    uint32_t r[2];
    ldmatrixX2(r, sx + xChunk<kXRow>(mm, c));
    b[0][0] = r[0];
    b[0][1] = r[1];
  } else {
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      const int q = lane >> 3;
      const int mm = (j + (q >> 1)) * 8 + (lane & 7), c = 2 * s + (q & 1);
      uint32_t r[4];
      ldmatrixX4(r, sx + xChunk<kXRow>(mm, c));
      b[j][0] = r[0];
      b[j][1] = r[1];
      b[j + 1][0] = r[2];
      b[j + 1][1] = r[3];
    }
  }
}

// A lane's 12 words of a 64x64 block: the block's three 16-byte vectors j hold lane l's words 4j..4j+3
// at j*32 + l (shared or global memory).
__device__ __forceinline__ void laneWords(const uint4* block, int lane, uint32_t (&wd)[12]) {
  const uint4 v0 = block[lane], v1 = block[32 + lane], v2 = block[64 + lane];
  const uint32_t w[12] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w, v2.x, v2.y, v2.z, v2.w};
#pragma unroll
  for (int i = 0; i < 12; ++i) wd[i] = w[i];
}

// The lane's 8 scales and biases (rows g and g+8 of each row tile, index 2*rt + hi_row) as pairs: the
// biases -z*s as the repack stored them (so asymmetric groups cost no more than symmetric ones), or
// -4*s for the symmetric variant (bias_vector == nullptr).
template <typename T>
__device__ __forceinline__ void laneScaleBias(const uint4& scale_vector, const uint4* bias_vector,
                                              typename Act<T>::T2 (&scale)[8], typename Act<T>::T2 (&bias)[8]) {
  using A = Act<T>;
  const T* sh = reinterpret_cast<const T*>(&scale_vector);
#pragma unroll
  for (int i = 0; i < 8; ++i) scale[i] = A::broadcast(sh[i]);
  if (bias_vector) {  // two loops, not a select per element: the branch is uniform across the warp
    const uint4 bv = *bias_vector;
    const T* bh = reinterpret_cast<const T*>(&bv);
#pragma unroll
    for (int i = 0; i < 8; ++i) bias[i] = A::broadcast(bh[i]);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) bias[i] = A::broadcast(A::fromFloat(-4.f * A::toFloat(sh[i])));
  }
}

// Calls f(row, column, value) for each of the lane's fp32 accumulators (the mma C fragments of its 4 row
// tiles and NT n8 tiles): row = 0..63 within the warp's 64-row strip, column = batch row 0..8*NT-1.
template <int NT, typename F>
__device__ __forceinline__ void forEachAccumulator(const float (&acc)[4][NT][4], int lane, F f) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int rt = 0; rt < 4; ++rt)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) f(rt * 16 + g + 8 * (e >> 1), j * 8 + 2 * t + (e & 1), acc[rt][j][e]);
}

template <int NT>
__device__ __forceinline__ void clearAccumulators(float (&acc)[4][NT][4]) {
#pragma unroll
  for (int rt = 0; rt < 4; ++rt)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[rt][j][e] = 0.f;
}

// The cp.async pipeline's prologue: the weights of the first STAGES-1 stages (one commit group each),
// then, once the kernel before this one in the stream has completed (griddepcontrol.wait; a no-op
// without programmatic dependent launch), their X (one commit group each). At iteration `it` the main
// loop then waits for the first STAGES + it groups, i.e. at most STAGES-2 pending, in the prologue and
// in the steady state alike. Everything that depends on earlier kernels (X, the scratch, Y) must be
// touched only after this. load_weights(s) / load_activations(s) fill stage s.
template <int STAGES, typename LoadWeights, typename LoadActivations>
__device__ __forceinline__ void pipelinePrologue(int iters, LoadWeights load_weights, LoadActivations load_activations) {
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < iters) load_weights(s);
    cpAsyncCommit();
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  // Every CTA of this grid is resident now, so the next kernel may start its own weight prologue on
  // whatever SM room is left while this one streams.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < iters) load_activations(s);
    cpAsyncCommit();
  }
}

// The 32-bit word of a 16-byte vector of eight 16-bit values that holds value i (in its low half for even
// i, its high half for odd i).
__device__ __forceinline__ uint32_t wordHolding(const uint4& v, int i) {
  return i < 2 ? v.x : (i < 4 ? v.y : (i < 6 ? v.z : v.w));
}

// The scale and bias that blockProductWith applies to the lane's row i (index 2*rt + hi_row).
template <typename T2>
struct RowScaleBias {
  T2 scale, bias;
};

// One warp's 64x64 block against a staged X tile: acc[rt][j] += dequant(block rows of tile rt) * X^T.
// wd: the lane's 12 words; row_scale_bias(i): RowScaleBias of the lane's row i (index 2*rt + hi_row).
// kByRow: take it once per row and k step and decode that row's two pairs next to it, instead of pair by
// pair. The two orders compute the same; the register allocation differs, and each was measured faster
// for one provider (pair by pair for stored broadcasts: the stream-K kernel spilled at m = 9..16 the other
// way; by row for blockProductPacked: 1.6 us faster
// at m = 32 than pair by pair).
template <typename T, int NT, bool kByRow, int kXRow, typename ScaleBiasOfRow>
__device__ __forceinline__ void blockProductWith(float (&acc)[4][NT][4], const uint32_t (&wd)[12],
                                                 ScaleBiasOfRow row_scale_bias, const uint4* sx, int lane) {
  using A = Act<T>;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    uint32_t b[NT][2];
    loadB<NT, kXRow>(b, sx, s, lane);
#pragma unroll
    for (int rt = 0; rt < 4; ++rt) {
      uint32_t a[4];  // A register r holds row g + 8 (r & 1) of the row tile
      auto decode = [&](int r, const auto& sb) {
        a[r] = asU32(A::fma2(decodePair<T>(4 * s + r, wd[3 * rt], wd[3 * rt + 1], wd[3 * rt + 2]), sb.scale, sb.bias));
      };
      if constexpr (kByRow) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const auto sb = row_scale_bias(2 * rt + h);
          decode(h, sb);
          decode(h + 2, sb);
        }
      } else {
#pragma unroll
        for (int r = 0; r < 4; ++r) decode(r, row_scale_bias(2 * rt + (r & 1)));
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) mma16816<T>(acc[rt][j], a, b[j][0], b[j][1]);
    }
  }
}

// blockProductWith the lane's 8 scales and biases as T2 broadcasts (laneScaleBias).
template <typename T, int NT, int kXRow = 8>
__device__ __forceinline__ void blockProduct(float (&acc)[4][NT][4], const uint32_t (&wd)[12],
                                             const typename Act<T>::T2 (&scale)[8],
                                             const typename Act<T>::T2 (&bias)[8], const uint4* sx, int lane) {
  using T2 = typename Act<T>::T2;
  blockProductWith<T, NT, false, kXRow>(acc, wd, [&](int i) { return RowScaleBias<T2>{scale[i], bias[i]}; }, sx, lane);
}

// blockProductWith the lane's scales and biases kept as the two 16-byte vectors they were loaded as (8
// registers instead of 16 broadcast pairs), each pair broadcast where it is used: more instructions,
// fewer live registers. bias_vector == nullptr: symmetric, bias -4 s.
template <typename T, int NT, int kXRow = 8>
__device__ __forceinline__ void blockProductPacked(float (&acc)[4][NT][4], const uint32_t (&wd)[12], const uint4& scale_vector,
                                                   const uint4* bias_vector, const uint4* sx, int lane) {
  using A = Act<T>;
  using T2 = typename A::T2;
  const uint4 scale_bits = scale_vector;
  const uint4 bias_bits = bias_vector ? *bias_vector : make_uint4(0, 0, 0, 0);
  auto broadcast = [](const uint4& v, int i) {  // value i of the vector in both halves
    const uint32_t w = wordHolding(v, i);
    return asPair<T2>(__byte_perm(w, w, i & 1 ? 0x3232 : 0x1010));
  };
  constexpr uint32_t kMinusFour = A::kMagic == 0x64006400u ? 0xC400C400u : 0xC080C080u;
  blockProductWith<T, NT, true, kXRow>(
      acc, wd,
      [&](int i) {
        const T2 scale = broadcast(scale_bits, i);
        return RowScaleBias<T2>{scale, bias_vector ? broadcast(bias_bits, i) : A::mul2(scale, asPair<T2>(kMinusFour))};
      },
      sx, lane);
}

// One 16-row tile of a 64x64 block against a staged X tile, symmetric groups (bias -4 s): acc[j] +=
// dequant(row tile) * X^T. w0..w2: the lane's three words of the row tile; scale_bits: the word holding the
// scales of the lane's rows g (low half) and g + 8 (high half). For the compensator's V at rank <= 32,
// whose two row tiles per block that are not padding are shared out to all eight warps (w3a16_streamk.cu).
template <typename T, int NT, int kXRow = 8>
__device__ __forceinline__ void rowTileProductSymmetric(float (&acc)[NT][4], uint32_t w0, uint32_t w1, uint32_t w2,
                                                        uint32_t scale_bits, const uint4* sx, int lane) {
  using A = Act<T>;
  using T2 = typename A::T2;
  constexpr uint32_t kMinusFour = A::kMagic == 0x64006400u ? 0xC400C400u : 0xC080C080u;
  T2 scale[2], bias[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    scale[h] = asPair<T2>(__byte_perm(scale_bits, scale_bits, h ? 0x3232 : 0x1010));
    bias[h] = A::mul2(scale[h], asPair<T2>(kMinusFour));
  }
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    uint32_t b[NT][2];
    loadB<NT, kXRow>(b, sx, s, lane);
    uint32_t a[4];  // register r holds row g + 8 (r & 1)
#pragma unroll
    for (int r = 0; r < 4; ++r) a[r] = asU32(A::fma2(decodePair<T>(4 * s + r, w0, w1, w2), scale[r & 1], bias[r & 1]));
#pragma unroll
    for (int j = 0; j < NT; ++j) mma16816<T>(acc[j], a, b[j][0], b[j][1]);
  }
}

// blockProduct with the scale and zero applied once per group in fp32 after the mma instead of to every
// weight pair: about half the decoder's instructions (one lop3 per pair, no hsub2/hfma2 pair).
//  * The A registers keep the magic number: magic + E q with E = fieldWeight(field of the pair's k octet),
//    and the B fragments of each octet are divided by its E (exact: a power of two), so one mma chain per
//    row tile gives sum(magic x / E) + sum(q x).
//  * One more mma chain with constant A gives, per batch column, -sum(magic x / E) in the rows of the
//    fragment's first half (A = -magic) and sum(x) in the second (A = E): one mma per k step for both.
//    (Two chains, one per quantity, need 4 more mma per block and measured slower: 14.5 against 13.6 us
//    at m = 1 on 4096x14336, in a build that also skipped half the epilogue at m = 1.) The first seeds
//    each row tile's chain, which then holds sum(q x); the second multiplies the bias:
//    acc += s * sum(q x) + (-z s) * sum(x).
// fp32 accumulation cancels the magic part (~1024 |x| per product for fp16): measured error against the
// CPU reference is in docs/w3a16-kernel.md. Registers: the 4 k-steps' B fragments stay live (8 NT).
// scale_vector / bias_vector: the lane's 8 scales and biases (index 2*rt + hi_row, as laneScaleBias);
// bias_vector == nullptr: symmetric, bias -4 s. They are converted where used, to keep registers free.
// odd_columns == false (a batch of one row): the accumulators of odd batch columns are left alone. Pass a
// compile-time value: a run-time one compiled to predicated FFMA that still took their issue slots.
template <typename T, int NT, int kXRow = 8>
__device__ __forceinline__ void blockProductGroupScaled(float (&acc)[4][NT][4], const uint32_t (&wd)[12],
                                                        const uint4& scale_vector, const uint4* bias_vector,
                                                        const uint4* sx, int lane, bool odd_columns = true) {
  using A = Act<T>;
  using T2 = typename A::T2;
  // Both vectors as values (one 16-byte load each: through a pointer the compiler read shared memory once
  // per element), their elements picked by shifts.
  const uint4 scale_bits = scale_vector;
  const uint4 bias_bits = bias_vector ? *bias_vector : make_uint4(0, 0, 0, 0);
  auto element = [](const uint4& v, int i) {
    const uint32_t w = wordHolding(v, i);
    return A::toFloat(A::fromBits(static_cast<unsigned short>(i & 1 ? w >> 16 : w & 0xFFFFu)));
  };
  auto weightBits = [](int field) {
    const int e = fieldWeight<T>(field);
    return e == 1 ? A::kOne : (e == 8 ? A::kEight : A::kSixtyFour);
  };
  uint32_t b[4][NT][2];
  // [j][0..1]: -sum(magic x / E) of batch columns 2t, 2t + 1 (rows g); [j][2..3]: sum(x) (rows g + 8)
  float offset_and_sum[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) offset_and_sum[j][e] = 0.f;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    loadB<NT, kXRow>(b[s], sx, s, lane);
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // b[.][.][h] holds k octet 2s + h (pairs 4s + 2h, 4s + 2h + 1)
      const int e = fieldWeight<T>(pairField(4 * s + 2 * h));
      if (e != 1)
#pragma unroll
        for (int j = 0; j < NT; ++j)
          b[s][j][h] = asU32(A::mul2(asPair<T2>(b[s][j][h]), asPair<T2>(e == 8 ? A::kEighth : A::kSixtyFourth)));
    }
    // A registers 0 and 2 hold rows 0-7 (k octets 2s and 2s + 1), registers 1 and 3 rows 8-15: -magic in
    // the first half, the octets' field weights in the second.
    const uint32_t lo = weightBits(pairField(4 * s)), hi = weightBits(pairField(4 * s + 2));
    const uint32_t constants[4] = {A::kMinusMagic, lo, A::kMinusMagic, hi};
#pragma unroll
    for (int j = 0; j < NT; ++j) mma16816<T>(offset_and_sum[j], constants, b[s][j][0], b[s][j][1]);
  }
  // A batch of one row (!odd_columns): each row tile's chain starts from offset_and_sum[j] itself, rows g
  // from the offset, as they should, rows g + 8 from sum(x), which the epilogue trades for the offset
  // (row8_fix = offset - sum). The seed with the offset in both halves is copied into a register quad per
  // row tile, ~12 moves per block: at m = 1 more than the epilogue's add per row g + 8 element (0.03-0.19
  // us faster per call on the Mixtral shapes), at m = 2..8, with twice the elements, less (up to 0.2 us slower).
  float row8_fix[NT][2];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int parity = 0; parity < 2; ++parity) row8_fix[j][parity] = offset_and_sum[j][parity] - offset_and_sum[j][2 + parity];
#pragma unroll
  for (int rt = 0; rt < 4; ++rt) {
    float t[NT][4];
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t a[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) a[r] = decodeRaw<T>(4 * s + r, wd[3 * rt], wd[3 * rt + 1], wd[3 * rt + 2]);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        if (s == 0 && !odd_columns) {  // seeded with the offset chain's fragment as it is (see row8_fix)
          mma16816From<T>(t[j], a, b[s][j][0], b[s][j][1], offset_and_sum[j]);
        } else if (s == 0) {  // both rows from the column's offset
          const float(&os)[4] = offset_and_sum[j];
          const float seed[4] = {os[0], os[1], os[0], os[1]};
          mma16816From<T>(t[j], a, b[s][j][0], b[s][j][1], seed);
        } else {
          mma16816<T>(t[j], a, b[s][j][0], b[s][j][1]);
        }
      }
    }
    float scale[2], bias[2];  // rows g and g + 8 of the row tile
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      scale[h] = element(scale_bits, 2 * rt + h);
      bias[h] = bias_vector ? element(bias_bits, 2 * rt + h) : -4.f * scale[h];
    }
    // acc += s sum(q x) + (-z s) sum(x) for the fragment elements of one batch column parity (e & 1)
    auto addGroup = [&](int parity) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = parity; e < 4; e += 2) {
          const float sum_qx = e < 2 || odd_columns ? t[j][e] : t[j][e] + row8_fix[j][parity];
          acc[rt][j][e] = fmaf(scale[e >> 1], sum_qx, fmaf(bias[e >> 1], offset_and_sum[j][2 + parity], acc[rt][j][e]));
        }
    };
    addGroup(0);
    if (odd_columns) addGroup(1);
  }
}

}  // namespace moewb::gpu::w3a16dev

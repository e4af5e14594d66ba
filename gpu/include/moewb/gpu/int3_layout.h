// SPDX-License-Identifier: MIT
#pragma once
// Host-side (plain C++) helpers for the two INT3 layouts the GPU code sees:
//  * the export layout of core/include/moewb/quant/int3_pack.h (zero-bit waste: 32 values in three
//    uint32 words, values in row-major order of the [n, k] weight) with fp16 scales and zeros
//    [n, k/64] row-major, W ~= (q - z) * s;
//  * the W3A16 kernel layout (docs/w3a16-kernel.md): the same 3 bits per value, but each 64x64 tile
//    (64 output rows of one group of 64 inputs) is reshuffled so that lane l of a warp finds the 32
//    values of its mma.sync A fragments in three uint32 words, loaded as three 16-byte vectors.
// All sizes are in elements of the named type. n and k must be multiples of 64.
#include <cstdint>

#include "moewb/gpu/device.h"

namespace moewb::gpu {

inline constexpr int kW3A16Group = 64;

// 16-bit type of the activations, and of the scales and biases in the kernel layout.
enum class W3A16Type : uint8_t { Fp16, Bf16 };

// Where the kernel layout keeps the 16 weight pairs of a lane's row tile (docs/w3a16-kernel.md): pair p
// (register p % 4 of k16 step p / 4) sits in slot pairSlot(p) of the three words; slot i < 15 is word
// i / 5, bits 3 (i % 5) (+16 for the odd column), slot 15 the spare bits 15 and 31. The order puts the
// pairs of one k octet (p / 2) into slots of one 3-bit field (bit 0, 3 or 6 of a 9-bit window), so that
// the stream-K kernel can divide each octet of X by its field's weight instead of decoding every pair
// exactly: octets 0-2 field 0, octets 3-5 field 1, octets 6-7 field 2 (the spare pair counts as field 2).
inline constexpr int pairSlot(int p) {
  return p < 6 ? (p / 2) * 5 + (p % 2) * 3 : (p < 12 ? ((p - 6) / 2) * 5 + 1 + ((p - 6) % 2) * 3 : (p < 15 ? (p - 12) * 5 + 2 : 15));
}
inline constexpr int pairField(int p) { return p < 6 ? 0 : (p < 12 ? 1 : 2); }

// uint32 words of packed 3-bit codes for an n x k weight (both layouts have the same size).
inline constexpr int64_t int3Words(int64_t n, int64_t k) { return n * k / 32 * 3; }
// fp16 scales (and zeros) per weight: one per row per group of 64.
inline constexpr int64_t groupCount(int64_t n, int64_t k) { return n * k / kW3A16Group; }
// True where the kernel layout can hold an n x k weight.
inline constexpr bool w3a16ShapeSupported(int64_t n, int64_t k) {
  return n > 0 && k > 0 && n % 64 == 0 && k % 64 == 0;
}

// Export layout (a host reference, independent of core's packInt3, so tests can check one with the
// other). `count` must be a multiple of 32; values must be 0..7.
void packInt3Export(const uint8_t* values, int64_t count, uint32_t* words);
void unpackInt3Export(const uint32_t* words, int64_t count, uint8_t* values);

// Export layout -> kernel layout. The kernel layout stores the scale s and the bias -z*s (fp16) of each
// group, so `kernel_bias` receives -z*s (scales and biases in `type`, see packCodesToW3A16). `zeros` may be nullptr for the symmetric variant (zero = 4); then
// `kernel_bias` is not written. Fails for unsupported shapes.
Status repackExportToW3A16(const uint32_t* export_words, const uint16_t* scales, const uint16_t* zeros, int64_t n,
                           int64_t k, uint32_t* kernel_words, uint16_t* kernel_scales, uint16_t* kernel_bias,
                           W3A16Type type = W3A16Type::Fp16);
// Codes [n, k] row-major -> kernel layout (used by the GPU quantizer's host path and the tests). Scales and
// zeros are fp16 bits; the kernel scales and biases are written in `type` (bf16: both rounded once from
// the exact s and -z*s).
Status packCodesToW3A16(const uint8_t* codes, const uint16_t* scales, const uint16_t* zeros, int64_t n, int64_t k,
                        uint32_t* kernel_words, uint16_t* kernel_scales, uint16_t* kernel_bias,
                        W3A16Type type = W3A16Type::Fp16);
// A MiLo INT3 low-rank factor (core's CompensatorFormat::Int3: groups of `group` consecutive values of the
// row-major [rows, cols] factor, x = (q - 4) * 2s/7 with one s per group) -> a symmetric kernel-layout
// weight of pad_rows x pad_cols (multiples of 64; the padding holds zeros), scale 2s/7 in `type`. Fails
// when a row's group of 64 columns would need two scales (group must be a multiple of cols or divide it
// into pieces of 64).
Status packInt3FactorToW3A16(const uint8_t* codes, const float* group_scales, int64_t rows, int64_t cols, int group,
                             int64_t pad_rows, int64_t pad_cols, W3A16Type type, uint32_t* kernel_words,
                             uint16_t* kernel_scales);
// The same from the export layout of a factor (NAME.lora_u / NAME.lora_v in an exported checkpoint:
// `.qweight` = the codes packed like the weights, `.scales` = one fp16 s per group).
Status repackExportFactorToW3A16(const uint32_t* export_words, const uint16_t* group_scales, int64_t rows, int64_t cols,
                                 int group, int64_t pad_rows, int64_t pad_cols, W3A16Type type, uint32_t* kernel_words,
                                 uint16_t* kernel_scales);
// Kernel layout -> codes [n, k] and row-major scales and biases (-z*s) [n, k/64] (the round-trip check).
Status unpackW3A16ToCodes(const uint32_t* kernel_words, const uint16_t* kernel_scales, const uint16_t* kernel_bias,
                          int64_t n, int64_t k, uint8_t* codes, uint16_t* scales, uint16_t* bias);

// IEEE half and bfloat16 <-> float on the host (round to nearest even), so callers need no CUDA header.
uint16_t floatToHalfBits(float f);
float halfBitsToFloat(uint16_t h);
uint16_t floatToBf16Bits(float f);
float bf16BitsToFloat(uint16_t h);
uint16_t floatToTypeBits(float f, W3A16Type type);

}  // namespace moewb::gpu

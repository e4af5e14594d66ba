// SPDX-License-Identifier: MIT
// Host reference for the export layout and the repack into the W3A16 kernel layout. The kernel layout
// is defined here in one place (kernelPosition) and mirrored by the decoder in w3a16_device.cuh.
#include "moewb/gpu/int3_layout.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace moewb::gpu {

void packInt3Export(const uint8_t* v, int64_t count, uint32_t* words) {
  for (int64_t c = 0; c < count / 32; ++c) {
    const uint8_t* x = v + c * 32;
    uint32_t* w = words + c * 3;
    uint32_t stream = 0;  // v24..v31, 3 bits each
    for (int i = 0; i < 8; ++i) stream |= uint32_t(x[24 + i] & 7) << (3 * i);
    for (int j = 0; j < 3; ++j) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i) word |= uint32_t(x[8 * j + i] & 7) << (3 * i);
      word |= ((stream >> (8 * j)) & 0xFFu) << 24;
      w[j] = word;
    }
  }
}

void unpackInt3Export(const uint32_t* words, int64_t count, uint8_t* v) {
  for (int64_t c = 0; c < count / 32; ++c) {
    const uint32_t* w = words + c * 3;
    uint8_t* x = v + c * 32;
    const uint32_t stream = (w[0] >> 24) | ((w[1] >> 24) << 8) | ((w[2] >> 24) << 16);
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 8; ++i) x[8 * j + i] = uint8_t((w[j] >> (3 * i)) & 7);
    for (int i = 0; i < 8; ++i) x[24 + i] = uint8_t((stream >> (3 * i)) & 7);
  }
}

namespace {

// Where value (row, col) of an n x k weight lives in the kernel layout.
// A 64x64 tile (strip = row/64, group = col/64) is a block of 384 words; inside it, lane l = 4g + t of
// the warp that owns the strip holds 12 words: words q = 3*rt + w for row tile rt = 0..3 (16 rows each).
// Those 12 words are stored as three 16-byte vectors j = q/4 at block + (j*32 + l)*4 + q%4, so a warp
// reads a block with three fully coalesced 512-byte loads.
// Within a row tile, the lane's 32 values are the 16 half2 pairs p = 4*s + r of the mma.sync A fragments
// of the four k16 steps s: register r holds row g + 8*(r&1), columns 16s + 2t + 8*(r>>1) + {0, 1}.
// Pair p sits in slot i = pairSlot(p) (int3_layout.h); for i < 15 in word w = i/5: low value at bit
// 3(i%5) of the low half-word, high value at bit 16 + 3(i%5) (5 values per 16-bit half, bits 15 and 31
// spare). Slot 15 is made of the spare bits: bit b of its low (high) value is bit 15 (31) of word b.
// 32 values in 96 bits: no waste.
struct Position {
  int64_t word;  // index into the uint32 array
  int bit;       // bit of the value's lowest bit, or -1 for the spare-bit pair
  int spare_half;  // spare pair: 0 = low value, 1 = high value
  int64_t block_word_base;
  int lane, rt;
};

inline Position kernelPosition(int64_t row, int64_t col, int64_t k) {
  const int64_t groups = k / 64;
  const int64_t block = (row / 64) * groups + col / 64;
  const int rin = int(row % 64), kin = int(col % 64);
  const int rt = rin / 16, r16 = rin % 16, g = r16 % 8, hi_row = r16 / 8;
  const int s = kin / 16, k16 = kin % 16, hi_k = k16 / 8, k8 = k16 % 8, t = k8 / 2, odd = k8 % 2;
  const int lane = 4 * g + t;
  const int r = hi_row + 2 * hi_k;
  const int p = 4 * s + r;
  Position pos{};
  pos.block_word_base = block * 384;
  pos.lane = lane;
  pos.rt = rt;
  if (const int slot = pairSlot(p); slot < 15) {
    const int w = slot / 5, i = slot % 5;
    const int q = 3 * rt + w;
    pos.word = block * 384 + int64_t((q / 4) * 32 + lane) * 4 + q % 4;
    pos.bit = 3 * i + 16 * odd;
  } else {
    pos.word = -1;
    pos.bit = -1;
    pos.spare_half = odd;
  }
  return pos;
}

inline int64_t laneWord(const Position& pos, int w) {
  const int q = 3 * pos.rt + w;
  return pos.block_word_base + int64_t((q / 4) * 32 + pos.lane) * 4 + q % 4;
}

// Kernel scale layout: per block 64 halves; lane group g reads 8 halves at g*8: (rt, hi_row) at 2rt+hi.
inline int64_t scaleIndex(int64_t row, int64_t group, int64_t k) {
  const int64_t block = (row / 64) * (k / 64) + group;
  const int rin = int(row % 64), rt = rin / 16, g = rin % 8, hi = (rin % 16) / 8;
  return block * 64 + g * 8 + 2 * rt + hi;
}

Status checkShape(int64_t n, int64_t k) {
  if (!w3a16ShapeSupported(n, k))
    return Status::failure(-1, "W3A16 layout needs n and k to be positive multiples of 64, got n=" + std::to_string(n) +
                                   " k=" + std::to_string(k));
  return Status::success();
}

}  // namespace

Status packCodesToW3A16(const uint8_t* codes, const uint16_t* scales, const uint16_t* zeros, int64_t n, int64_t k,
                        uint32_t* kw, uint16_t* ks, uint16_t* kz, W3A16Type type) {
  if (Status s = checkShape(n, k); !s.ok()) return s;
  std::memset(kw, 0, size_t(int3Words(n, k)) * 4);
  for (int64_t row = 0; row < n; ++row)
    for (int64_t col = 0; col < k; ++col) {
      const uint32_t v = codes[row * k + col];
      if (v > 7) return Status::failure(-1, "INT3 code above 7 at row " + std::to_string(row) + " col " + std::to_string(col));
      const Position pos = kernelPosition(row, col, k);
      if (pos.bit >= 0) {
        kw[pos.word] |= v << pos.bit;
      } else {
        for (int b = 0; b < 3; ++b) kw[laneWord(pos, b)] |= ((v >> b) & 1u) << (15 + 16 * pos.spare_half);
      }
    }
  const int64_t groups = k / 64;
  for (int64_t row = 0; row < n; ++row)
    for (int64_t gi = 0; gi < groups; ++gi) {
      const int64_t dst = scaleIndex(row, gi, k);
      const float scale = halfBitsToFloat(scales[row * groups + gi]);
      ks[dst] = type == W3A16Type::Fp16 ? scales[row * groups + gi] : floatToTypeBits(scale, type);
      // The kernel adds -z*s (one multiply, correctly rounded, as the GPU would do it) instead of
      // subtracting z: that saves two instructions per register pair in the inner loop.
      if (zeros && kz) kz[dst] = floatToTypeBits(-(halfBitsToFloat(zeros[row * groups + gi]) * scale), type);
    }
  return Status::success();
}

Status repackExportToW3A16(const uint32_t* export_words, const uint16_t* scales, const uint16_t* zeros, int64_t n,
                           int64_t k, uint32_t* kw, uint16_t* ks, uint16_t* kz, W3A16Type type) {
  if (Status s = checkShape(n, k); !s.ok()) return s;
  // Row by row keeps the temporary small (k codes) for multi-GB checkpoints.
  std::vector<uint8_t> codes(size_t(n * k));
  unpackInt3Export(export_words, n * k, codes.data());
  return packCodesToW3A16(codes.data(), scales, zeros, n, k, kw, ks, kz, type);
}

Status packInt3FactorToW3A16(const uint8_t* codes, const float* group_scales, int64_t rows, int64_t cols, int group,
                             int64_t pad_rows, int64_t pad_cols, W3A16Type type, uint32_t* kw, uint16_t* ks) {
  if (Status s = checkShape(pad_rows, pad_cols); !s.ok()) return s;
  if (rows < 1 || cols < 1 || rows > pad_rows || cols > pad_cols || group < 1)
    return Status::failure(-1, "INT3 factor of " + std::to_string(rows) + "x" + std::to_string(cols) + " (group " +
                                   std::to_string(group) + ") does not fit a " + std::to_string(pad_rows) + "x" +
                                   std::to_string(pad_cols) + " kernel layout");
  // Each (row, 64 columns) of the kernel layout has one scale: the factor's groups must not split it.
  if (!(group % cols == 0 || (cols % group == 0 && group % 64 == 0)))
    return Status::failure(-1, "INT3 factor with " + std::to_string(cols) + " columns and groups of " +
                                   std::to_string(group) + " values needs two scales in one group of 64 columns");
  const int64_t kgroups = pad_cols / 64;
  std::vector<uint8_t> padded(size_t(pad_rows * pad_cols), 4);  // code 4 = 0 in the symmetric variant
  std::vector<uint16_t> scales(size_t(pad_rows * kgroups), 0);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(codes + r * cols, codes + (r + 1) * cols, padded.begin() + r * pad_cols);
    for (int64_t kg = 0; kg * 64 < cols; ++kg) {
      const float s = group_scales[(r * cols + kg * 64) / group];
      scales[size_t(r * kgroups + kg)] = floatToHalfBits(2.f * s / 7.f);
    }
  }
  // packCodesToW3A16 takes fp16 scales; for bf16 the factor's scale is rounded once, from the fp32 value.
  if (Status s = packCodesToW3A16(padded.data(), scales.data(), nullptr, pad_rows, pad_cols, kw, ks, nullptr); !s.ok())
    return s;
  if (type != W3A16Type::Fp16)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t kg = 0; kg * 64 < cols; ++kg)
        ks[scaleIndex(r, kg, pad_cols)] = floatToTypeBits(2.f * group_scales[(r * cols + kg * 64) / group] / 7.f, type);
  return Status::success();
}

Status unpackW3A16ToCodes(const uint32_t* kw, const uint16_t* ks, const uint16_t* kz, int64_t n, int64_t k,
                          uint8_t* codes, uint16_t* scales, uint16_t* zeros) {
  if (Status s = checkShape(n, k); !s.ok()) return s;
  for (int64_t row = 0; row < n; ++row)
    for (int64_t col = 0; col < k; ++col) {
      const Position pos = kernelPosition(row, col, k);
      uint32_t v = 0;
      if (pos.bit >= 0) {
        v = (kw[pos.word] >> pos.bit) & 7u;
      } else {
        for (int b = 0; b < 3; ++b) v |= ((kw[laneWord(pos, b)] >> (15 + 16 * pos.spare_half)) & 1u) << b;
      }
      codes[row * k + col] = uint8_t(v);
    }
  const int64_t groups = k / 64;
  for (int64_t row = 0; row < n; ++row)
    for (int64_t gi = 0; gi < groups; ++gi) {
      const int64_t src = scaleIndex(row, gi, k);
      scales[row * groups + gi] = ks[src];
      if (zeros && kz) zeros[row * groups + gi] = kz[src];  // the stored bias -z*s
    }
  return Status::success();
}

uint16_t floatToHalfBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7FFFFFFFu;
  if (absx >= 0x7F800000u) return uint16_t(sign | 0x7C00u | (absx > 0x7F800000u ? 0x200u : 0u));  // inf/nan
  if (absx >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (absx < 0x38800000u) {  // subnormal half or zero: units of 2^-24, nearbyint rounds to even
    float mag;
    std::memcpy(&mag, &absx, 4);
    return uint16_t(sign | uint32_t(std::nearbyint(std::ldexp(mag, 24))));
  }
  uint32_t h = ((absx - 0x38000000u) >> 13);  // rebias exponent 127 -> 15
  const uint32_t rem = absx & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return uint16_t(sign | h);
}

uint16_t floatToBf16Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7FFFu + ((x >> 16) & 1u);                                          // round to nearest even
  return uint16_t(x >> 16);
}

float bf16BitsToFloat(uint16_t h) {
  const uint32_t x = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t floatToTypeBits(float f, W3A16Type type) {
  return type == W3A16Type::Bf16 ? floatToBf16Bits(f) : floatToHalfBits(f);
}

Status repackExportFactorToW3A16(const uint32_t* words, const uint16_t* group_scales, int64_t rows, int64_t cols,
                                 int group, int64_t pad_rows, int64_t pad_cols, W3A16Type type, uint32_t* kw, uint16_t* ks) {
  if (rows < 1 || cols < 1 || (rows * cols) % 32 != 0 || group < 1)
    return Status::failure(-1, "INT3 factor of " + std::to_string(rows) + "x" + std::to_string(cols) +
                                   ": the export layout packs whole runs of 32 values");
  std::vector<uint8_t> codes(size_t(rows * cols));
  unpackInt3Export(words, rows * cols, codes.data());
  std::vector<float> scales(size_t((rows * cols + group - 1) / group));
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = halfBitsToFloat(group_scales[i]);
  return packInt3FactorToW3A16(codes.data(), scales.data(), rows, cols, group, pad_rows, pad_cols, type, kw, ks);
}

float halfBitsToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FFu;
  float f;
  if (e == 0) {
    f = std::ldexp(float(m), -24);
    return sign ? -f : f;
  }
  uint32_t x;
  if (e == 31) x = sign | 0x7F800000u | (m << 13);
  else x = sign | ((e + 112) << 23) | (m << 13);
  std::memcpy(&f, &x, 4);
  return f;
}

}  // namespace moewb::gpu

// SPDX-License-Identifier: MIT
#include "moewb/dtype.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "moewb/error.h"

namespace moewb {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  std::size_t size;
  bool floating;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::BOOL, "BOOL", 1, false},      {DType::U8, "U8", 1, false},       {DType::I8, "I8", 1, false},
    {DType::F8_E5M2, "F8_E5M2", 1, true}, {DType::F8_E4M3, "F8_E4M3", 1, true}, {DType::I16, "I16", 2, false},
    {DType::U16, "U16", 2, false},        {DType::F16, "F16", 2, true},      {DType::BF16, "BF16", 2, true},
    {DType::I32, "I32", 4, false},        {DType::U32, "U32", 4, false},     {DType::F32, "F32", 4, true},
    {DType::F64, "F64", 8, true},         {DType::I64, "I64", 8, false},     {DType::U64, "U64", 8, false},
};
const DTypeInfo& info(DType t) { return kDTypes[static_cast<int>(t)]; }

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Decodes one element; `p` points at it.
float decodeOne(DType t, const std::byte* p) {
  switch (t) {
    case DType::U8: return static_cast<float>(load<uint8_t>(p));
    case DType::I8: return static_cast<float>(load<int8_t>(p));
    case DType::F8_E5M2: return fp8e5m2ToFloat(load<uint8_t>(p));
    case DType::F8_E4M3: return fp8e4m3ToFloat(load<uint8_t>(p));
    case DType::I16: return static_cast<float>(load<int16_t>(p));
    case DType::U16: return static_cast<float>(load<uint16_t>(p));
    case DType::F16: return halfToFloat(load<uint16_t>(p));
    case DType::BF16: return bf16ToFloat(load<uint16_t>(p));
    case DType::I32: return static_cast<float>(load<int32_t>(p));
    case DType::U32: return static_cast<float>(load<uint32_t>(p));
    case DType::F32: return load<float>(p);
    case DType::F64: return static_cast<float>(load<double>(p));
    case DType::I64: return static_cast<float>(load<int64_t>(p));
    case DType::U64: return static_cast<float>(load<uint64_t>(p));
    case DType::BOOL: break;
  }
  throw Error("cannot convert BOOL tensors to float");
}
}  // namespace

std::optional<DType> parseDType(std::string_view name) {
  for (const auto& d : kDTypes)
    if (d.name == name) return d.type;
  return std::nullopt;
}
std::string_view dtypeName(DType t) { return info(t).name; }
std::size_t dtypeSize(DType t) { return info(t).size; }
bool isFloatingPoint(DType t) { return info(t).floating; }

float bf16ToFloat(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

uint16_t floatToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t floatToHalf(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00;  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00;  // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {                      // below the smallest normal half (2^-14): subnormal
    // value * 2^24 rounded to nearest even gives the subnormal mantissa.
    float scaled = std::bit_cast<float>(abs) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13);
}

float fp8e4m3ToFloat(uint8_t v) {
  // OCP E4M3 (fn): bias 7, no infinities, S.1111.111 is NaN.
  const bool neg = v & 0x80;
  const int exp = (v >> 3) & 0xf;
  const int mant = v & 0x7;
  float out;
  if (exp == 0xf && mant == 0x7)
    out = std::numeric_limits<float>::quiet_NaN();
  else if (exp == 0)
    out = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant/8 * 2^-6
  else
    out = std::ldexp(1.0f + mant / 8.0f, exp - 7);
  return neg ? -out : out;
}

float fp8e5m2ToFloat(uint8_t v) {
  // E5M2 is the top byte of an IEEE half.
  return halfToFloat(static_cast<uint16_t>(v) << 8);
}

void convertToFloat(DType t, const std::byte* src, std::size_t count, float* dst) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, count * 4); return;
    case DType::BF16: {
      // In blocks through a local buffer: `src` (std::byte) may alias `dst` as far as the compiler knows,
      // which kept the element loop scalar; on the buffer it vectorises. Decoding converts every weight it
      // streams once per token, so this loop was most of a decoding step.
      constexpr std::size_t kBlock = 1024;
      uint16_t bits[kBlock];
      for (std::size_t b = 0; b < count; b += kBlock) {
        const std::size_t n = std::min(kBlock, count - b);
        std::memcpy(bits, src + 2 * b, 2 * n);
        float* out = dst + b;
        for (std::size_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(static_cast<uint32_t>(bits[i]) << 16);
      }
      return;
    }
    case DType::F16:
      for (std::size_t i = 0; i < count; ++i) dst[i] = halfToFloat(load<uint16_t>(src + 2 * i));
      return;
    default: break;
  }
  convertToFloatStrided(t, src, count, 1, dst);
}

void convertToFloatStrided(DType t, const std::byte* src, std::size_t count, std::size_t stride, float* dst) {
  if (t == DType::BOOL) throw Error("cannot convert BOOL tensors to float");
  const std::size_t step = stride * dtypeSize(t);
  for (std::size_t i = 0; i < count; ++i) dst[i] = decodeOne(t, src + i * step);
}

}  // namespace moewb

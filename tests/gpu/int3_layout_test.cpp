// SPDX-License-Identifier: MIT
// The W3A16 kernel layout and its repack from the export layout. Host-only: runs without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "moewb/gpu/bench.h"
#include "moewb/gpu/int3_layout.h"
#include "moewb/quant/compensator.h"
#include "moewb/quant/grouped_quant.h"
#include "moewb/quant/int3_pack.h"

namespace {

using namespace moewb::gpu;

std::vector<uint8_t> randomCodes(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> c(static_cast<size_t>(count));
  for (auto& v : c) v = uint8_t(rng() & 7);
  return c;
}

// Guards that the GPU's export reference and core's packInt3 agree bit for bit: the repack reads files
// that core wrote.
TEST(Int3Layout, ExportPackingMatchesCore) {
  const auto codes = randomCodes(32 * 257, 1);
  std::vector<uint32_t> mine(static_cast<size_t>(int3Words(1, 32 * 257)));
  packInt3Export(codes.data(), int64_t(codes.size()), mine.data());
  const moewb::quant::PackedInt3 core = moewb::quant::packInt3(codes);
  ASSERT_EQ(core.words.size(), mine.size());
  EXPECT_EQ(core.words, mine);
  std::vector<uint8_t> back(codes.size());
  unpackInt3Export(core.words.data(), int64_t(codes.size()), back.data());
  EXPECT_EQ(back, codes);
}

// The slot order the stream-K decoder relies on: every slot used once, and the two pairs of each k octet
// (p = 2o, 2o + 1) in slots of the same 3-bit field, so that one factor per octet of X undoes the field's
// weight (blockProductGroupScaled).
TEST(Int3Layout, PairSlotsGiveEachKOctetOneField) {
  std::vector<int> seen(16, 0);
  for (int p = 0; p < 16; ++p) {
    const int slot = pairSlot(p);
    ASSERT_GE(slot, 0);
    ASSERT_LT(slot, 16);
    ++seen[size_t(slot)];
    const int field_of_slot = slot == 15 ? 2 : (slot % 5) % 3;  // bit 3 (slot % 5) of a 9-bit window
    EXPECT_EQ(field_of_slot, pairField(p)) << "pair " << p;
  }
  EXPECT_EQ(seen, std::vector<int>(16, 1));
  for (int octet = 0; octet < 8; ++octet) EXPECT_EQ(pairField(2 * octet), pairField(2 * octet + 1)) << "octet " << octet;
}

// Export -> kernel layout -> codes is the identity for codes and scales; the bias is -z*s in fp16.
TEST(Int3Layout, RepackRoundTrip) {
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{64, 64}, {128, 192}, {1408, 128}, {192, 1408}}) {
    const auto codes = randomCodes(n * k, uint32_t(n + k));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> sd(0.001f, 0.05f), zd(0.0f, 7.0f);
    std::vector<uint16_t> scales(static_cast<size_t>(groupCount(n, k))), zeros(scales.size());
    for (auto& s : scales) s = floatToHalfBits(sd(rng));
    for (auto& z : zeros) z = floatToHalfBits(zd(rng));
    std::vector<uint32_t> exported(static_cast<size_t>(int3Words(n, k)));
    packInt3Export(codes.data(), n * k, exported.data());
    std::vector<uint32_t> kw(exported.size());
    std::vector<uint16_t> ks(scales.size()), kb(scales.size());
    ASSERT_TRUE(repackExportToW3A16(exported.data(), scales.data(), zeros.data(), n, k, kw.data(), ks.data(), kb.data()).ok());
    std::vector<uint8_t> codes2(codes.size());
    std::vector<uint16_t> scales2(scales.size()), bias2(scales.size());
    ASSERT_TRUE(unpackW3A16ToCodes(kw.data(), ks.data(), kb.data(), n, k, codes2.data(), scales2.data(), bias2.data()).ok());
    EXPECT_EQ(codes2, codes) << n << "x" << k;
    EXPECT_EQ(scales2, scales) << n << "x" << k;
    for (size_t i = 0; i < zeros.size(); ++i)
      ASSERT_EQ(bias2[i], floatToHalfBits(-halfBitsToFloat(zeros[i]) * halfBitsToFloat(scales[i])));
  }
}

TEST(Int3Layout, RejectsUnsupportedShapes) {
  std::vector<uint8_t> codes(96 * 64);
  std::vector<uint16_t> s(96), z(96), ks(96), kb(96);
  std::vector<uint32_t> kw(static_cast<size_t>(int3Words(96, 64)));
  EXPECT_FALSE(packCodesToW3A16(codes.data(), s.data(), z.data(), 96, 64, kw.data(), ks.data(), kb.data()).ok());
  codes[0] = 9;
  EXPECT_FALSE(packCodesToW3A16(codes.data(), s.data(), z.data(), 64, 64, kw.data(), ks.data(), kb.data()).ok());
}

TEST(Int3Layout, HalfConversionRoundsToNearestEven) {
  EXPECT_EQ(floatToHalfBits(1.0f), 0x3C00);
  EXPECT_EQ(floatToHalfBits(-2.5f), 0xC100);
  EXPECT_EQ(floatToHalfBits(65504.f), 0x7BFF);
  EXPECT_EQ(floatToHalfBits(1e6f), 0x7C00);
  EXPECT_EQ(floatToHalfBits(1.0f + 1.0f / 2048.0f), 0x3C00);  // tie to even
  EXPECT_EQ(floatToHalfBits(5.96046448e-8f), 0x0001);         // smallest subnormal
  for (uint32_t h = 0; h < 0x7C00; ++h) ASSERT_EQ(floatToHalfBits(halfBitsToFloat(uint16_t(h))), h);
}

TEST(Int3Layout, Bf16ConversionRoundsToNearestEven) {
  EXPECT_EQ(floatToBf16Bits(1.0f), 0x3F80);
  EXPECT_EQ(floatToBf16Bits(-2.5f), 0xC020);
  EXPECT_EQ(floatToBf16Bits(1.0f + 1.0f / 256.0f), 0x3F80);  // tie to even (down)
  EXPECT_EQ(floatToBf16Bits(1.0f + 3.0f / 256.0f), 0x3F82);  // tie to even (up)
  EXPECT_EQ(floatToBf16Bits(3.4e38f), 0x7F80);               // rounds past the largest: inf
  for (uint32_t h = 0; h < 0x7F80; h += 7) ASSERT_EQ(floatToBf16Bits(bf16BitsToFloat(uint16_t(h))), h);
}

// MiLo's INT3 factors (core's CompensatorFormat::Int3) in the kernel layout: every value of the factor is
// (code - 4) * scale there, with the scale 2s/7 of its core group; the padding decodes to zero. U-shaped
// (rank 32: one core group spans two rows) and V-shaped (groups along a row) factors, fp16 and bf16.
TEST(Int3Layout, Int3FactorsKeepCoresValues) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 0.02f);
  struct Shape {
    int64_t rows, cols, pad_rows, pad_cols;
  };
  for (const Shape sh : {Shape{192, 32, 192, 64}, Shape{128, 64, 128, 64}, Shape{64, 128, 64, 128}, Shape{32, 320, 64, 320},
                         Shape{96, 256, 128, 256}}) {
    moewb::MatrixRM f(sh.rows, sh.cols);
    for (int64_t i = 0; i < f.size(); ++i) f.data()[i] = nd(rng);
    const auto q = moewb::quant::quantizeFactor(f, moewb::quant::CompensatorFormat::Int3, 64);
    const moewb::MatrixRM deq = moewb::quant::dequantizeFactor(q);
    for (W3A16Type type : {W3A16Type::Fp16, W3A16Type::Bf16}) {
      std::vector<uint32_t> kw(size_t(int3Words(sh.pad_rows, sh.pad_cols)));
      std::vector<uint16_t> ks(size_t(groupCount(sh.pad_rows, sh.pad_cols)));
      ASSERT_TRUE(packInt3FactorToW3A16(q.codes.data(), q.scales.data(), sh.rows, sh.cols, 64, sh.pad_rows, sh.pad_cols,
                                        type, kw.data(), ks.data()).ok());
      std::vector<uint8_t> codes(size_t(sh.pad_rows * sh.pad_cols));
      std::vector<uint16_t> scales(ks.size());
      ASSERT_TRUE(unpackW3A16ToCodes(kw.data(), ks.data(), nullptr, sh.pad_rows, sh.pad_cols, codes.data(), scales.data(),
                                     nullptr).ok());
      const double rel = type == W3A16Type::Bf16 ? 1.0 / 256 : 1.0 / 2048;  // one rounding of the scale
      for (int64_t r = 0; r < sh.pad_rows; ++r)
        for (int64_t c = 0; c < sh.pad_cols; ++c) {
          const uint16_t sbits = scales[size_t(r * (sh.pad_cols / 64) + c / 64)];
          const double scale = type == W3A16Type::Bf16 ? bf16BitsToFloat(sbits) : halfBitsToFloat(sbits);
          const double got = (double(codes[size_t(r * sh.pad_cols + c)]) - 4.0) * scale;
          const double want = r < sh.rows && c < sh.cols ? double(deq(r, c)) : 0.0;
          ASSERT_NEAR(got, want, std::fabs(want) * rel + 1e-12) << sh.rows << "x" << sh.cols << " at " << r << "," << c;
        }
    }
  }
  // From the export layout (core's packInt3 of the codes, fp16 scales): the same kernel layout.
  {
    moewb::MatrixRM f(256, 32);
    for (int64_t i = 0; i < f.size(); ++i) f.data()[i] = nd(rng);
    const auto q = moewb::quant::quantizeFactor(f, moewb::quant::CompensatorFormat::Int3, 64);
    const moewb::quant::PackedInt3 packed = moewb::quant::packInt3(q.codes);
    std::vector<uint16_t> half_scales;
    for (float s : q.scales) half_scales.push_back(floatToHalfBits(s));
    std::vector<uint32_t> a(size_t(int3Words(256, 64))), b(a.size());
    std::vector<uint16_t> as(size_t(groupCount(256, 64))), bs(as.size());
    ASSERT_TRUE(packInt3FactorToW3A16(q.codes.data(), q.scales.data(), 256, 32, 64, 256, 64, W3A16Type::Fp16, a.data(),
                                      as.data()).ok());
    ASSERT_TRUE(repackExportFactorToW3A16(packed.words.data(), half_scales.data(), 256, 32, 64, 256, 64, W3A16Type::Fp16,
                                          b.data(), bs.data()).ok());
    EXPECT_EQ(a, b);
    EXPECT_EQ(as, bs);
  }
  // Rank 48: a core group of 64 values would straddle two rows' 64-column groups.
  std::vector<uint8_t> codes(64 * 48, 4);
  std::vector<float> gs(48, 0.1f);
  std::vector<uint32_t> kw(size_t(int3Words(64, 64)));
  std::vector<uint16_t> ks(size_t(groupCount(64, 64)));
  EXPECT_FALSE(packInt3FactorToW3A16(codes.data(), gs.data(), 64, 48, 64, 64, 64, W3A16Type::Fp16, kw.data(), ks.data()).ok());
}

// The host HQQ reference used by the device benchmark (where core is not built) must be core's HQQ.
TEST(Int3Layout, HostHqqReferenceMatchesCoreHqq) {
  const int64_t rows = 48, cols = 256;
  moewb::MatrixRM w(rows, cols);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (int64_t i = 0; i < w.size(); ++i) w.data()[i] = nd(rng);
  const auto core = moewb::quant::quantizeHqq(w, {3, 64});
  std::vector<uint8_t> codes(static_cast<size_t>(rows * cols));
  std::vector<float> scales(static_cast<size_t>(rows * cols / 64)), zeros(scales.size());
  hqqReferenceHost(w.data(), rows, cols, codes.data(), scales.data(), zeros.data());
  int64_t differ = 0;
  for (size_t i = 0; i < codes.size(); ++i) differ += codes[i] != core.codes[i];
  EXPECT_LE(differ, int64_t(codes.size()) / 1000);
  for (size_t i = 0; i < scales.size(); ++i) {
    EXPECT_EQ(scales[i], core.scales[i]);
    EXPECT_NEAR(zeros[i], core.zeros[i], 4e-3);  // at most one fp16 step where float sums reorder a tie
  }
}

}  // namespace

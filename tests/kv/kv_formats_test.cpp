// SPDX-License-Identifier: MIT
// KV-cache formats (moewb/methods/kv_method.h): packed sizes against the arithmetic, quantize->dequantize
// against a reference written here (min/max asymmetric per group in double, fp16 metadata through the
// compiler's _Float16), and the quick-spec spellings.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "moewb/error.h"
#include "moewb/methods/kv_method.h"
#include "moewb/methods/registry.h"

namespace moewb::methods {
namespace {

const KvMethod& kv(std::string_view name) {
  return MethodRegistry::instance().getKv(name, "test");
}

double half(double x) {
  return static_cast<double>(static_cast<_Float16>(x));
}

// The reference: asymmetric min/max over the group in double; scale and zero as stored (fp16).
void referenceGroup(std::vector<double>& x, const std::vector<int64_t>& idx, int bits) {
  double lo = x[idx[0]], hi = x[idx[0]];
  for (int64_t i : idx) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  const double levels = std::pow(2.0, bits) - 1, zero = half(lo), scale = half((hi - lo) / levels);
  for (int64_t i : idx) {
    double q = 0;
    if (scale > 0) q = std::min(levels, std::max(0.0, std::nearbyint((x[i] - zero) / scale)));
    x[i] = q * scale + zero;
  }
}

struct Shape {
  int64_t tokens;
  int heads, dim;
};

std::vector<float> randomChunk(const Shape& s, int64_t stride, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<std::size_t>(s.tokens * stride), 1234.5f);  // padding must stay
  for (int64_t t = 0; t < s.tokens; ++t)
    for (int64_t c = 0; c < int64_t(s.heads) * s.dim; ++c)
      // Outlier channels (every 7th, x20), as keys have.
      x[t * stride + c] = normal(rng) * (c % 7 == 3 ? 20.0f : 1.0f) + (c % 5 == 0 ? 3.0f : 0.0f);
  return x;
}

TEST(KvFormats, RegistryListsTheBuiltInFormats) {
  EXPECT_EQ(MethodRegistry::instance().kvNamesText(), "fp16, int8, int4, int2, kivi-2, kivi-4, moqae");
  EXPECT_EQ(MethodRegistry::instance().findKv("rtn"), nullptr);  // a second kind: weight names are apart
  EXPECT_EQ(MethodRegistry::instance().find("int4"), nullptr);
}

// Guards the memory numbers of `moewb eval --kv`: codes + fp16 scale + fp16 zero per group.
TEST(KvFormats, PackedSizesMatchTheArithmetic) {
  const std::vector<Shape> shapes = {{32, 2, 64}, {32, 8, 128}, {7, 3, 48}, {1, 1, 16}, {64, 1, 96}};
  for (const Shape& s : shapes) {
    const int64_t elements = s.tokens * s.heads * s.dim;
    EXPECT_EQ(kv("fp16").storedBits(KvTensor::Keys, s.tokens, s.heads, s.dim, kv("fp16").defaults()), 16 * elements);
    for (const char* name : {"int8", "int4", "int2", "kivi-2", "kivi-4"}) {
      const int bits = name[std::string_view(name).size() - 1] - '0';
      for (int group : {32, 64, 128}) {
        KvSettings st = kv(name).defaults();
        st.extra["group"] = std::to_string(group);
        const int64_t codes = (bits * elements + 7) / 8 * 8;
        // Keys: one scale and zero per (head, channel) of the chunk, whatever the group.
        EXPECT_EQ(kv(name).storedBits(KvTensor::Keys, s.tokens, s.heads, s.dim, st), codes + 32 * s.heads * s.dim)
            << name << " keys " << s.tokens << "x" << s.heads << "x" << s.dim;
        // Values: per token and head, ceil(dim / min(group, dim)) groups.
        const int g = std::min(group, s.dim);
        const int64_t groups = s.tokens * s.heads * ((s.dim + g - 1) / g);
        EXPECT_EQ(kv(name).storedBits(KvTensor::Values, s.tokens, s.heads, s.dim, st), codes + 32 * groups)
            << name << " values group " << group;
      }
    }
  }
  // The numbers docs/kv-cache.md quotes: int4 on a 32-token chunk of head_dim 128 is 4 + 1 bits per key
  // element and 4 + 0.25 per value element.
  const KvSettings int4 = kv("int4").defaults();
  EXPECT_EQ(kv("int4").storedBits(KvTensor::Keys, 32, 1, 128, int4), 32 * 128 * 5);
  EXPECT_EQ(kv("int4").storedBits(KvTensor::Values, 32, 1, 128, int4), 32 * 128 * 4 + 32 * 32);
}

TEST(KvFormats, RoundToHalfMatchesTheCompiler) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> mant(-1, 1);
  std::uniform_int_distribution<int> expo(-30, 17);
  for (int i = 0; i < 200000; ++i) {
    const double x = std::ldexp(mant(rng), expo(rng));
    const double want = std::fabs(x) >= 65504 ? std::copysign(65504.0, x) : half(x);
    ASSERT_EQ(roundToHalf(x), want) << x;
  }
  EXPECT_EQ(roundToHalf(1.0 + std::ldexp(1.0, -11)), 1.0);  // a tie goes to even
  EXPECT_EQ(roundToHalf(1e9), 65504.0);                     // saturates
}

// dequantize(quantize(x)) equals the reference per format, for keys (per channel down the chunk) and
// values (per token, groups within a head), with a row stride wider than the row.
TEST(KvFormats, QuantizeChunkMatchesTheReference) {
  const std::vector<Shape> shapes = {{32, 2, 64}, {32, 3, 48}, {5, 1, 128}, {64, 2, 16}};
  uint32_t seed = 1;
  for (const Shape& s : shapes)
    for (const char* name : {"int8", "int4", "int2", "kivi-2", "kivi-4"})
      for (int group : {32, 64, 128})
        for (KvTensor tensor : {KvTensor::Keys, KvTensor::Values}) {
          const int bits = name[std::string_view(name).size() - 1] - '0';
          KvSettings st = kv(name).defaults();
          st.extra["group"] = std::to_string(group);
          const int64_t width = int64_t(s.heads) * s.dim, stride = width + 5;
          std::vector<float> got = randomChunk(s, stride, seed++);
          std::vector<double> want(got.begin(), got.end());
          kv(name).quantizeChunk(KvChunk{got.data(), s.tokens, s.heads, s.dim, stride, tensor}, st);
          if (tensor == KvTensor::Keys) {
            for (int64_t c = 0; c < width; ++c) {
              std::vector<int64_t> idx;
              for (int64_t t = 0; t < s.tokens; ++t) idx.push_back(t * stride + c);
              referenceGroup(want, idx, bits);
            }
          } else {
            const int g = std::min(group, s.dim);
            for (int64_t t = 0; t < s.tokens; ++t)
              for (int h = 0; h < s.heads; ++h)
                for (int d0 = 0; d0 < s.dim; d0 += g) {
                  std::vector<int64_t> idx;
                  for (int d = d0; d < std::min(d0 + g, s.dim); ++d) idx.push_back(t * stride + h * s.dim + d);
                  referenceGroup(want, idx, bits);
                }
          }
          double max_err = 0;
          for (std::size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(got[i], static_cast<float>(want[i]))
                << name << " group " << group << (tensor == KvTensor::Keys ? " keys" : " values") << " element "
                << i;
          for (std::size_t i = 0; i < got.size(); ++i) max_err = std::max(max_err, std::fabs(got[i] - want[i]));
          EXPECT_LT(max_err, 1e-3);
        }
}

TEST(KvFormats, Fp16RoundsEveryElementToHalf) {
  const Shape s{8, 2, 32};
  std::vector<float> x = randomChunk(s, 64, 99);
  const std::vector<float> before = x;
  kv("fp16").quantizeChunk(KvChunk{x.data(), s.tokens, s.heads, s.dim, 64, KvTensor::Values}, kv("fp16").defaults());
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], static_cast<float>(half(before[i])));
}

TEST(KvSpecs, SpellingsOfGroupsChunksAndResiduals) {
  EXPECT_EQ(parseKvSpec("int4").format.label(), "int4");
  EXPECT_EQ(parseKvSpec("int4").format.settings.extra.at("group"), "128");
  EXPECT_EQ(parseKvSpec("int4-g32").format.settings.extra.at("group"), "32");
  EXPECT_EQ(parseKvSpec("int4-g32").format.label(), "int4:group=32");
  EXPECT_EQ(parseKvSpec("int4:group=32").format.label(), "int4:group=32");
  EXPECT_EQ(parseKvSpec("int2-g64:chunk=16").chunk_tokens, 16);
  EXPECT_EQ(parseKvSpec("int8").chunk_tokens, 32);
  const KvSpec kivi = parseKvSpec("kivi-2:residual=64");
  EXPECT_EQ(kivi.format.method->residualTokens(kivi.format.settings), 64);
  EXPECT_EQ(parseKvSpec("kivi-4").format.method->residualTokens(parseKvSpec("kivi-4").format.settings), 32);
  EXPECT_EQ(parseKvSpec("kivi-4").format.settings.extra.at("group"), "32");
  EXPECT_EQ(parseKvSpec("fp16").format.method->name(), "fp16");
}

// Guards the error a user sees for a typo: it names the spec and every known format.
TEST(KvSpecs, UnknownOrMalformedSpecsAreErrors) {
  try {
    parseKvSpec("int3");
    FAIL() << "int3 was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'int3'"), std::string::npos) << what;
    EXPECT_NE(what.find("fp16, int8, int4, int2, kivi-2, kivi-4"), std::string::npos) << what;
  }
  EXPECT_THROW(parseKvSpec("int4-g48"), Error);        // not a group size of the format
  EXPECT_THROW(parseKvSpec("fp16-g32"), Error);        // fp16 has no group
  EXPECT_THROW(parseKvSpec("int4:bits=3"), Error);     // no such option
  EXPECT_THROW(parseKvSpec("int4:group"), Error);      // not KEY=VALUE
  EXPECT_THROW(parseKvSpec("int4:"), Error);
  EXPECT_THROW(parseKvSpec("int4:chunk=0"), Error);
  EXPECT_THROW(parseKvSpec("int8:residual=4"), Error);  // only KIVI has a residual window
  EXPECT_THROW(parseKvSpec("rtn:3"), Error);            // a weight method is not a KV format
}

}  // namespace
}  // namespace moewb::methods

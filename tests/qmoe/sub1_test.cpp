// SPDX-License-Identifier: MIT
// qmoe-sub1: QMoE's sub-1-bit dictionary code. The learned dictionary is QMoE's priority-queue
// construction, a synthetic matrix with QMoE's code statistics (88.5% zeros) compresses >= 20x against
// bf16 with everything stored counted and reaches >= 0.8x the entropy limit, malformed input is refused,
// and a calibrated run over the demo model decodes bit for bit to qmoe-ternary's codes and survives
// export and import with one shared dictionary.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "moewb/engine/calibration.h"
#include "moewb/error.h"
#include "moewb/methods/options.h"
#include "moewb/methods/registry.h"
#include "moewb/quant/export.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/quant/payload.h"
#include "moewb/quant/payloads/ternary_dictionary.h"
#include "test_support.h"

namespace {

using moewb::quant::TernaryCodes;
using moewb::quant::TernaryDictionary;
using moewb::quant::TernaryDictionaryPayload;

// Pair counts of independent ternary codes with P(0) = p0 and P(-1) = P(+1) = (1 - p0) / 2, scaled to
// integers (exact for p0 = 0.885 at 1e8).
std::array<uint64_t, 9> independentPairCounts(double p0) {
  const double t[3] = {(1 - p0) / 2, p0, (1 - p0) / 2};
  std::array<uint64_t, 9> counts{};
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) counts[std::size_t(3 * a + b)] = uint64_t(std::llround(t[a] * t[b] * 1e8));
  return counts;
}

// Codes with QMoE's statistics: 0 with probability p0, else -1 or +1 alike (splitmix64, 21 bits a code).
TernaryCodes syntheticCodes(int64_t rows, int64_t cols, double p0, uint64_t seed) {
  TernaryCodes c{rows, cols, std::vector<int8_t>(std::size_t(rows * cols)), std::vector<float>(std::size_t(rows), -0.5f),
                 std::vector<float>(std::size_t(rows), 0.5f)};
  uint64_t state = seed;
  auto next = [&state] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const uint64_t zero_below = uint64_t(p0 * double(1 << 20));
  for (std::size_t i = 0; i < c.codes.size();) {
    uint64_t bits = next();
    for (int k = 0; k < 3 && i < c.codes.size(); ++k, ++i, bits >>= 21) {
      const uint64_t u = bits & ((1u << 20) - 1);
      c.codes[i] = u < zero_below ? 0 : ((bits >> 20) & 1 ? 1 : -1);
    }
  }
  return c;
}

double codeEntropy(const TernaryCodes& c) {
  double n[3] = {0, 0, 0};
  for (int8_t v : c.codes) n[v + 1] += 1;
  double h = 0;
  for (double k : n)
    if (k > 0) h -= k / double(c.codes.size()) * std::log2(k / double(c.codes.size()));
  return h;
}

TEST(QmoeSub1, TheLearnedDictionaryIsQmoesPriorityQueueConstruction) {
  const auto d = moewb::quant::learnTernaryDictionary(independentPairCounts(0.885));
  ASSERT_EQ(d->size(), 65536);
  const double t[3] = {0.0575, 0.885, 0.0575};
  std::set<std::vector<uint8_t>> words;
  double expected_pairs = 0;  // sum of the codewords' probabilities: pairs per greedy match
  for (int64_t i = 0; i < d->size(); ++i) {
    const auto e = d->entry(i);
    ASSERT_GE(e.size(), 1u);
    ASSERT_LE(e.size(), 14u);
    if (i < 9) {  // the single pairs first, in symbol order
      ASSERT_EQ(e.size(), 1u);
      EXPECT_EQ(e[0], i);
    }
    const std::vector<uint8_t> w(e.begin(), e.end());
    ASSERT_TRUE(words.insert(w).second) << "codeword " << i << " twice";
    if (w.size() > 1)  // prefix-closed: every codeword extends an earlier one
      EXPECT_TRUE(words.count(std::vector<uint8_t>(w.begin(), w.end() - 1))) << "codeword " << i;
    double p = 1;
    for (uint8_t s : w) p *= t[moewb::quant::ternaryPairFirst(s) + 1] * t[moewb::quant::ternaryPairSecond(s) + 1];
    expected_pairs += p;
  }
  // QMoE's construction with its p0 = 0.885 (a heap of candidate sequences by probability, 2^16
  // codewords of up to 14 pairs) gives 11.6839 pairs per codeword: 0.6847 bits per weight.
  EXPECT_NEAR(expected_pairs, 11.683927, 1e-5);
  // Fewer codewords: the most probable ones, still prefix-closed.
  const auto small = moewb::quant::learnTernaryDictionary(independentPairCounts(0.885), 100, 3);
  EXPECT_EQ(small->size(), 100);
  for (int64_t i = 0; i < small->size(); ++i) EXPECT_LE(small->entry(i).size(), 3u);
  // Only zeros seen: the zero runs 1..14 plus the 8 other single pairs, which any matrix may still need.
  std::array<uint64_t, 9> zeros{};
  zeros[moewb::quant::ternaryPairSymbol(0, 0)] = 1000;
  EXPECT_EQ(moewb::quant::learnTernaryDictionary(zeros)->size(), 9 + 13);
}

TEST(QmoeSub1, SyntheticQmoeCodesCompressOverTwentyTimesWithEverythingCounted) {
  // 8192 x 16384 (134M weights, QMoE's 88.5% zeros). The dictionary of 2^16 codewords (512 kB) is all
  // this matrix's (0.031 bits per weight here), so the matrix must be large for the dictionary to weigh
  // about what it does in a model (Switch-c2048 codes 1.6T weights with one). The stream alone takes
  // ~0.736 bits per weight: greedy longest match over QMoE's dictionary averages ~10.9 pairs per codeword
  // (the sum of the codewords' probabilities, 11.68, overstates it: a match stops before a pair that does
  // not extend it, so the next codeword starts on a rarer pair than average).
  const int64_t rows = 8192, cols = 16384;
  const TernaryCodes codes = syntheticCodes(rows, cols, 0.885, 36);
  const auto dictionary = moewb::quant::learnTernaryDictionary(moewb::quant::countTernaryPairs(codes));
  const auto payload = moewb::quant::TernaryEncoder(dictionary).encode(codes);
  const double weights = double(rows * cols);
  // Stream (u16 per codeword), row offsets (u32), row levels (2 x fp16), the whole dictionary (8 B each).
  const double bytes = double(payload->storedBytes() + dictionary->storedBytes());
  EXPECT_EQ(payload->storedBytes(), 2 * int64_t(payload->stream().size()) + 4 * (rows + 1) + 4 * rows);
  const double bits = 8 * bytes / weights, entropy = codeEntropy(codes);
  const double compression = 16 / bits, limit = 16 / entropy;
  std::printf("synthetic p0 = 0.885: %.4f bits per weight (stream %.4f), %.2fx vs bf16; entropy %.4f bits "
              "(limit %.2fx); %.3f of the limit\n",
              bits, 16.0 * double(payload->stream().size()) / weights, compression, entropy, limit,
              compression / limit);
  EXPECT_LE(bits, 0.8);
  EXPECT_GE(compression, 20.0);
  EXPECT_GE(compression / limit, 0.8);
  // Spot-check the decoder on a few rows (the whole matrix decodes exactly: the demo-model test).
  for (int64_t r : {int64_t(0), rows / 2, rows - 1}) {
    const std::vector<int8_t> back = payload->decodeTernaryCodes(r);
    ASSERT_TRUE(std::equal(back.begin(), back.end(), codes.codes.begin() + r * cols)) << "row " << r;
  }
}

TEST(QmoeSub1, MalformedInputIsRefused) {
  using moewb::Error;
  std::array<uint64_t, 9> none{};
  EXPECT_THROW(moewb::quant::learnTernaryDictionary(none), Error);
  const auto counts = independentPairCounts(0.5);
  EXPECT_THROW(moewb::quant::learnTernaryDictionary(counts, 8), Error);
  EXPECT_THROW(moewb::quant::learnTernaryDictionary(counts, 65537), Error);
  EXPECT_THROW(moewb::quant::learnTernaryDictionary(counts, 1000, 0), Error);
  EXPECT_THROW(moewb::quant::learnTernaryDictionary(counts, 1000, 15), Error);
  using Words = std::vector<std::vector<uint8_t>>;
  EXPECT_THROW(TernaryDictionary(Words{}), Error);
  EXPECT_THROW(TernaryDictionary(Words{{}}), Error);
  EXPECT_THROW(TernaryDictionary(Words{{9}}), Error);
  EXPECT_THROW(TernaryDictionary(Words{std::vector<uint8_t>(15, 4)}), Error);
  EXPECT_THROW(TernaryDictionary(Words(65537, {4})), Error);
  EXPECT_THROW(moewb::quant::TernaryEncoder(nullptr), Error);
  const auto d = moewb::quant::learnTernaryDictionary(counts, 200);
  const moewb::quant::TernaryEncoder encoder(d);
  TernaryCodes c{2, 3, {0, 1, -1, 0, 2, 0}, {-1, -1}, {1, 1}};
  EXPECT_THROW(encoder.encode(c), Error);  // a code of 2
  c.codes = {0, 1, -1, 0, 1};
  EXPECT_THROW(encoder.encode(c), Error);  // 5 codes for 2 x 3
  // A dictionary without some single pair cannot encode a matrix holding it.
  const moewb::quant::TernaryEncoder zeros_only(std::make_shared<TernaryDictionary>(
      Words{{moewb::quant::ternaryPairSymbol(0, 0)}}));
  c.codes = {0, 0, 1, 0, 0, 0};
  EXPECT_THROW(zeros_only.encode(c), Error);
  // An alpha that is none of fit, max or a number in (0, 1].
  const auto& sub1 = moewb::methods::weightMethod("qmoe-sub1");
  for (const char* bad : {"0", "1.5", "-1", "half", "0.5x"}) {
    moewb::quant::QuantizeSettings s = sub1.defaults();
    moewb::methods::setOption(*sub1.option("alpha"), s, bad, "alpha");
    EXPECT_THROW(sub1.validate(s), Error) << bad;
  }
  moewb::quant::QuantizeSettings ok = sub1.defaults();
  moewb::methods::setOption(*sub1.option("alpha"), ok, "0.75", "alpha");
  EXPECT_NO_THROW(sub1.validate(ok));
  // A stored dictionary with a codeword of 15 pairs.
  const std::vector<uint32_t> words = {15u << 28, 0u};
  EXPECT_THROW(TernaryDictionary::fromWords(words, "t"), Error);
}

TEST(QmoeSub1, DecodesBitExactlyToQmoeTernaryAndSurvivesExport) {
  // Layers 0 and 1 of the demo model, calibrated on 48 tokens.
  const moewb::ModelCatalog catalog(moewb::Checkpoint::open(moewb::test::demoModelDir().string()));
  std::vector<std::size_t> mats;
  std::vector<std::string> names;
  for (std::size_t i : moewb::quant::quantizableMatrices(catalog)) {
    const std::string& n = catalog.matrices()[i].name;
    if (n.rfind("model.layers.0.", 0) == 0 || n.rfind("model.layers.1.", 0) == 0) {
      mats.push_back(i);
      names.push_back(n);
    }
  }
  const auto engine = moewb::engine::MoeEngine::open(moewb::test::demoModelDir().string());
  std::vector<int32_t> ids;
  for (int i = 0; i < 48; ++i) ids.push_back(1 + (i * 37 + 11) % 4000);
  moewb::engine::CalibrationOptions o;
  o.seq_len = 24;
  const moewb::quant::CalibrationSet set = moewb::engine::collectHessians(*engine, ids, names, o);
  moewb::quant::PipelineOptions options;
  options.calibration = &set;
  for (const char* alpha : {"max", "fit"}) {
    SCOPED_TRACE(alpha);
    auto settings = [&](const char* method) {
      const auto& m = moewb::methods::weightMethod(method);
      moewb::quant::QuantizeSettings s = m.defaults();
      moewb::methods::setOption(*m.option("alpha"), s, alpha, "alpha");
      return s;
    };
    const auto ternary = moewb::quant::quantizeModel(catalog, settings("qmoe-ternary"), mats, {}, {}, {}, {}, options);
    std::vector<double> progress;
    const auto sub1 = moewb::quant::quantizeModel(
        catalog, settings("qmoe-sub1"), mats, {},
        [&](double f, std::string_view) {
          progress.push_back(f);
          return true;
        },
        {}, {}, options);
    ASSERT_EQ(sub1.matrices.size(), ternary.matrices.size());
    EXPECT_TRUE(std::is_sorted(progress.begin(), progress.end()));
    std::set<const void*> dictionaries;
    int64_t own_bytes = 0;
    for (std::size_t i = 0; i < sub1.matrices.size(); ++i) {
      const auto& a = dynamic_cast<const TernaryDictionaryPayload&>(*ternary.matrices[i].payload);
      const auto& b = dynamic_cast<const TernaryDictionaryPayload&>(*sub1.matrices[i].payload);
      SCOPED_TRACE(sub1.matrices[i].source.name);
      EXPECT_EQ(a.lo(), b.lo());
      EXPECT_EQ(a.hi(), b.hi());
      for (int64_t r = 0; r < a.rows(); ++r) ASSERT_EQ(a.decodeTernaryCodes(r), b.decodeTernaryCodes(r)) << r;
      EXPECT_EQ(sub1.matrices[i].fallback, ternary.matrices[i].fallback);
      EXPECT_EQ(sub1.matrices[i].bytes, b.storedBytes());
      dictionaries.insert(b.dictionary().get());
      own_bytes += b.storedBytes() - sub1.matrices[i].original_bytes;
      for (const char* m : {"bits_per_weight", "stream_bits_per_weight", "dictionary_share_bytes",
                            "entropy_rate_ratio", "code_entropy_bits", "zero_fraction", "dictionary_learned"})
        EXPECT_TRUE(sub1.matrices[i].measures.count(m)) << m;
    }
    ASSERT_EQ(dictionaries.size(), 1u) << "one dictionary for the whole model";
    if (std::string(alpha) == "max")  // sparse codes: the learned dictionary beats the fixed one
      EXPECT_EQ(sub1.matrices[0].measures.at("dictionary_learned"), 1.0);
    const auto& dictionary = *dynamic_cast<const TernaryDictionaryPayload&>(*sub1.matrices[0].payload).dictionary();
    EXPECT_EQ(sub1.compressed_bytes, sub1.original_bytes + own_bytes + dictionary.storedBytes());
    if (std::string(alpha) == "max") {
      // Without keep_payloads the model step still runs (payloads are dropped after it): same sizes.
      moewb::quant::PipelineOptions lean = options;
      lean.keep_payloads = false;
      const auto report = moewb::quant::quantizeModel(catalog, settings("qmoe-sub1"), mats, {}, {}, {}, {}, lean);
      EXPECT_EQ(report.compressed_bytes, sub1.compressed_bytes);
      for (std::size_t i = 0; i < report.matrices.size(); ++i) {
        EXPECT_FALSE(report.matrices[i].payload);
        EXPECT_EQ(report.matrices[i].measures, sub1.matrices[i].measures);
      }
    }
    const auto dir = moewb::test::makeTempDir("sub1-export");
    moewb::quant::writeCompressedModel(catalog, sub1, dir / "out");
    const auto model = moewb::quant::CompressedModel::open(dir / "out");
    for (const auto& q : sub1.matrices) {
      const auto back = model->read(q.source.name);
      EXPECT_EQ(back.measures, q.measures);
      EXPECT_EQ(moewb::quant::dequantize(back), moewb::quant::dequantize(q)) << q.source.name;
    }
  }
}

}  // namespace

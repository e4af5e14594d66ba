// SPDX-License-Identifier: MIT
// Payload kinds (moewb/quant/payload.h): codebook / product-quantized codes and dictionary-coded ternary
// codes dequantize as their formulas say, count exactly the bytes they store, reject malformed tensors
// naming them, and survive an export and CompressedModel::read unchanged beside grouped codes.
#include "moewb/quant/payload.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/dtype.h"
#include "moewb/engine/variants.h"
#include "moewb/error.h"
#include "moewb/quant/export.h"
#include "moewb/quant/grouped_quant.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/quant/payloads/codebook.h"
#include "moewb/quant/payloads/ternary_dictionary.h"
#include "test_support.h"

namespace {

using namespace moewb::quant;
using moewb::DType;
using moewb::MatrixRM;
namespace fs = std::filesystem;

float half(float x) {
  return moewb::halfToFloat(moewb::floatToHalf(x));
}

// An in-memory store of tensors: where a payload writes and reads in unit tests, so that single tensors
// can be spoiled on purpose.
class MemoryStore final : public PayloadWriter, public PayloadSource {
 public:
  struct Tensor {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> data;
  };
  std::map<std::string, Tensor> tensors;
  std::map<std::string, int> shared_writes;  // how often each shared object was written

  void addTensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                 std::span<const std::byte> data) override {
    ASSERT_FALSE(tensors.count(name)) << name << " written twice";
    tensors[name] = {dtype, std::move(shape), std::vector<std::byte>(data.begin(), data.end())};
  }
  void addHalf(const std::string& name, std::vector<int64_t> shape, std::span<const float> values) override {
    std::vector<uint16_t> h;
    for (float v : values) h.push_back(moewb::floatToHalf(v));
    addValues(name, DType::F16, std::move(shape), h);
  }
  std::string sharedTensor(const void* identity, const std::string& hint,
                           const SharedWriteFn& write) override {
    if (auto it = names_.find(identity); it != names_.end()) return it->second;
    const std::string name = fmt::format("{}.{}", hint, names_.size());
    names_[identity] = name;
    ++shared_writes[name];
    write(*this, name);
    return name;
  }
  bool has(const std::string& tensor) const override { return tensors.count(tensor) > 0; }
  DType dtype(const std::string& tensor) const override { return get(tensor).dtype; }
  std::vector<int64_t> shape(const std::string& tensor) const override { return get(tensor).shape; }
  std::span<const std::byte> bytes(const std::string& tensor, DType dtype) const override {
    if (get(tensor).dtype != dtype) fail(tensor, "wrong dtype");
    return get(tensor).data;
  }
  std::vector<float> floats(const std::string& tensor) const override {
    std::vector<float> out;
    for (uint16_t h : values<uint16_t>(tensor, DType::F16)) out.push_back(moewb::halfToFloat(h));
    return out;
  }
  std::string describe(const std::string& tensor) const override { return "memory: tensor '" + tensor + "'"; }
  SharedPayloadObjects& sharedObjects() const override { return objects_; }

  int64_t bytesUnder(const std::string& prefix) const {
    int64_t n = 0;
    for (const auto& [name, t] : tensors)
      if (name.starts_with(prefix)) n += int64_t(t.data.size());
    return n;
  }
  template <typename T>
  T* at(const std::string& tensor, std::size_t i) {
    return reinterpret_cast<T*>(tensors.at(tensor).data.data()) + i;
  }

 private:
  const Tensor& get(const std::string& tensor) const {
    const auto it = tensors.find(tensor);
    if (it == tensors.end()) fail(tensor, "missing");
    return it->second;
  }
  std::map<const void*, std::string> names_;
  mutable SharedPayloadObjects objects_;
};

// The hand-built codebook of the first tests: 5x12 in subspaces of 3 (m = 4); stage 0 with 16 clusters
// and an fp16 codebook, stage 1 with 5 clusters and a 6-bit codebook with min/step per subspace.
struct HandCodebook {
  static constexpr int rows = 5, cols = 12, d = 3, m = 4;
  CodebookStage s0, s1;
  HandCodebook() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> value(-0.5f, 0.5f), lo(-0.4f, -0.2f), st(0.005f, 0.012f);
    s0.clusters = 16;
    for (int i = 0; i < rows * m; ++i) s0.codes.push_back(uint16_t(rng() % 16));
    for (int i = 0; i < m * 16 * d; ++i) s0.values.push_back(half(value(rng)));
    s1.clusters = 5;
    s1.codebook_bits = 6;
    for (int i = 0; i < rows * m; ++i) s1.codes.push_back(uint16_t(rng() % 5));
    for (int i = 0; i < m * 5 * d; ++i) s1.levels.push_back(uint16_t(rng() % 64));
    for (int j = 0; j < m; ++j) {
      s1.min.push_back(half(lo(rng)));
      s1.step.push_back(half(st(rng)));
    }
  }
  CodebookPayload payload() const { return CodebookPayload(rows, cols, d, {s0, s1}); }
};

TEST(CodebookPayload, DequantizesAsTheSumOfItsStagesCodebookVectors) {
  const HandCodebook h;
  const MatrixRM w = h.payload().dequantize();
  ASSERT_EQ(w.rows(), h.rows);
  ASSERT_EQ(w.cols(), h.cols);
  for (int r = 0; r < h.rows; ++r)
    for (int j = 0; j < h.m; ++j)
      for (int t = 0; t < h.d; ++t) {
        const int c0 = h.s0.codes[r * h.m + j], c1 = h.s1.codes[r * h.m + j];
        const float first = h.s0.values[(j * 16 + c0) * h.d + t];
        const float second = h.s1.min[j] + float(h.s1.levels[(j * 5 + c1) * h.d + t]) * h.s1.step[j];
        EXPECT_EQ(w(r, j * h.d + t), 0.0f + first + second) << r << " " << j << " " << t;
      }
}

TEST(CodebookPayload, StoredBytesAreTheSumOfThePackedParts) {
  const HandCodebook h;
  const CodebookPayload p = h.payload();
  // Stage 0: 20 codes of 4 bits, 8 per u32 -> 3 words; fp16 codebook [4, 16, 3].
  const int64_t stage0 = 3 * 4 + 4 * 16 * 3 * 2;
  // Stage 1: 20 codes of 3 bits, 10 per u32 -> 2 words; 60 levels of 6 bits, 5 per u32 -> 12 words;
  // min and step in fp16 per subspace [4, 2].
  const int64_t stage1 = 2 * 4 + 12 * 4 + 4 * 2 * 2;
  EXPECT_EQ(p.storedBytes(), stage0 + stage1);
  // ...and exactly what its tensors hold.
  MemoryStore store;
  nlohmann::json entry;
  p.write(store, "w", entry);
  EXPECT_EQ(store.bytesUnder("w."), p.storedBytes());
  EXPECT_EQ(store.tensors.at("w.codes.0").dtype, DType::U32);
  EXPECT_EQ(store.tensors.at("w.codebook.0").dtype, DType::F16);
  EXPECT_EQ(store.tensors.at("w.codebook.1").dtype, DType::U32);
  EXPECT_EQ(store.tensors.at("w.codebook_scale.1").shape, (std::vector<int64_t>{4, 2}));
  // The first code word holds codes 0..7 of stage 0, 4 bits each from bit 0.
  uint32_t first_word = 0;
  for (int i = 0; i < 8; ++i) first_word |= uint32_t(h.s0.codes[i]) << (4 * i);
  EXPECT_EQ(*store.at<uint32_t>("w.codes.0", 0), first_word);
}

TEST(CodebookPayload, EightAndSixteenBitCodesAreStoredAsU8AndU16AndReadBack) {
  std::mt19937 rng(3);
  CodebookStage a, b;
  a.clusters = 256;    // 8 bits
  b.clusters = 40000;  // 16 bits
  const int rows = 3, cols = 4, d = 2, m = 2;
  for (int i = 0; i < rows * m; ++i) {
    a.codes.push_back(uint16_t(rng() % 256));
    b.codes.push_back(uint16_t(rng() % 40000));
  }
  for (int i = 0; i < m * 256 * d; ++i) a.values.push_back(float(int(rng() % 200) - 100) / 64.0f);
  for (int i = 0; i < m * 40000 * d; ++i) b.values.push_back(float(int(rng() % 200) - 100) / 1024.0f);
  const CodebookPayload p(rows, cols, d, {a, b});
  MemoryStore store;
  nlohmann::json entry = {{"rows", rows}, {"cols", cols}};
  p.write(store, "w", entry);
  EXPECT_EQ(store.tensors.at("w.codes.0").dtype, DType::U8);
  EXPECT_EQ(store.tensors.at("w.codes.1").dtype, DType::U16);
  EXPECT_EQ(store.bytesUnder("w."), p.storedBytes());
  entry["payload"] = "codebook";
  const auto back = readPayload(store, "w", entry);
  EXPECT_EQ(back->dequantize(), p.dequantize());
}

TEST(CodebookPayload, RejectsPartsThatDoNotFit) {
  HandCodebook h;
  EXPECT_THROW(CodebookPayload(h.rows, 10, h.d, {h.s0}), moewb::Error);  // 3 does not divide 10
  CodebookStage bad = h.s0;
  bad.codes[3] = 16;  // of 16 clusters
  EXPECT_THROW(CodebookPayload(h.rows, h.cols, h.d, {bad}), moewb::Error);
  bad = h.s1;
  bad.levels[0] = 64;  // of 6 bits
  EXPECT_THROW(CodebookPayload(h.rows, h.cols, h.d, {bad}), moewb::Error);
}

// A random ternary matrix with P(0) = 0.885 (QMoE's measured sparsity) and a small dictionary: the 9 single
// pairs, every 2-pair word, runs of 2..14 zero pairs, and a few zero runs with one nonzero pair.
TernaryCodes randomTernary(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  TernaryCodes t;
  t.rows = rows;
  t.cols = cols;
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float x = u(rng);
    t.codes.push_back(int8_t(x < 0.885f ? 0 : x < 0.9425f ? -1 : 1));
  }
  for (int64_t r = 0; r < rows; ++r) {
    t.lo.push_back(-0.01f * float(r + 1));
    t.hi.push_back(0.02f * float(r + 1));
  }
  return t;
}

std::shared_ptr<const TernaryDictionary> smallDictionary() {
  std::vector<std::vector<uint8_t>> words;
  for (uint8_t s = 0; s < 9; ++s) words.push_back({s});
  for (uint8_t a = 0; a < 9; ++a)
    for (uint8_t b = 0; b < 9; ++b) words.push_back({a, b});
  const uint8_t zero = ternaryPairSymbol(0, 0);
  for (int n = 3; n <= TernaryDictionary::kMaxPairs; ++n)
    words.push_back(std::vector<uint8_t>(std::size_t(n), zero));
  for (uint8_t s = 0; s < 9; ++s)
    for (int n : {4, 8}) {
      std::vector<uint8_t> w(std::size_t(n), zero);
      w.back() = s;
      words.push_back(w);
    }
  return std::make_shared<TernaryDictionary>(words);
}

TEST(TernaryDictionaryPayload, EncodedRandomCodesDecodeBitExactly) {
  const TernaryCodes codes = randomTernary(16, 37, 11);  // odd rows: the last pair is padded
  const auto dict = smallDictionary();
  const auto p = encodeWithDictionary(codes, dict);
  EXPECT_LT(int64_t(p->stream().size()), 16 * 19 / 2) << "long zero runs should take one codeword";
  for (int64_t r = 0; r < codes.rows; ++r) {
    const std::vector<int8_t> row(codes.codes.begin() + r * codes.cols,
                                  codes.codes.begin() + (r + 1) * codes.cols);
    ASSERT_EQ(p->decodeTernaryCodes(r), row) << "row " << r;
  }
  const MatrixRM w = p->dequantize();
  for (int64_t r = 0; r < codes.rows; ++r)
    for (int64_t c = 0; c < codes.cols; ++c) {
      const int8_t k = codes.codes[std::size_t(r * codes.cols + c)];
      EXPECT_EQ(w(r, c), k < 0 ? half(codes.lo[r]) : k > 0 ? half(codes.hi[r]) : 0.0f);
    }
  // Stored bytes: u16 stream + u32 offsets [rows + 1] + fp16 (lo, hi) per row; the dictionary apart.
  EXPECT_EQ(p->storedBytes(), 2 * int64_t(p->stream().size()) + 4 * 17 + 4 * 16);
  MemoryStore store;
  nlohmann::json entry;
  p->write(store, "w", entry);
  EXPECT_EQ(store.bytesUnder("w."), p->storedBytes());
  EXPECT_EQ(store.bytesUnder("moewb.shared."), dict->storedBytes());
}

TEST(TernaryDictionary, WordsFollowTheDocumentedBitLayout) {
  std::vector<uint8_t> long_word;
  for (int i = 0; i < 10; ++i) long_word.push_back(uint8_t(i % 9));
  const TernaryDictionary d({{5}, long_word});
  const std::vector<uint32_t> w = d.words();
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0], (1u << 28) | 5u);
  EXPECT_EQ(w[1], 0u);
  // Pairs 0..6 in the first word's low 28 bits, the count (10) in its top 4; pairs 7..9 in the second.
  uint32_t first = 10u << 28, second = 0;
  for (int i = 0; i < 7; ++i) first |= uint32_t(i % 9) << (4 * i);
  for (int i = 7; i < 10; ++i) second |= uint32_t(i % 9) << (4 * (i - 7));
  EXPECT_EQ(w[2], first);
  EXPECT_EQ(w[3], second);
  const auto back = TernaryDictionary::fromWords(w, "test");
  ASSERT_EQ(back->size(), 2);
  EXPECT_TRUE(std::ranges::equal(back->entry(1), long_word));
  // Symbols: 3 * (a + 1) + (b + 1).
  EXPECT_EQ(ternaryPairSymbol(-1, -1), 0);
  EXPECT_EQ(ternaryPairSymbol(0, 0), 4);
  EXPECT_EQ(ternaryPairSymbol(1, -1), 6);
  EXPECT_EQ(ternaryPairFirst(6), 1);
  EXPECT_EQ(ternaryPairSecond(6), -1);
}

// Writes an encoded matrix into a store, spoils one value, and expects the reader's error to name the
// spoiled tensor and say what is wrong.
void expectSpoiledRead(const std::function<void(MemoryStore&, const std::string& dict)>& spoil,
                       const std::string& tensor, const std::string& what) {
  const auto p = encodeWithDictionary(randomTernary(6, 20, 5), smallDictionary());
  MemoryStore store;
  nlohmann::json entry = {{"rows", 6}, {"cols", 20}, {"payload", "dictionary"}};
  p->write(store, "w", entry);
  const std::string dict = entry.at("dictionary").get<std::string>();
  ASSERT_NO_THROW(readPayload(store, "w", entry));
  MemoryStore spoiled;
  spoiled.tensors = store.tensors;
  spoil(spoiled, dict);
  try {
    readPayload(spoiled, "w", entry);
    ADD_FAILURE() << "a spoiled " << tensor << " was read";
  } catch (const moewb::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'" + (tensor == "DICT" ? dict : tensor) + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
  }
}

TEST(TernaryDictionaryPayload, MalformedTensorsAreRefusedNamingTheTensor) {
  // A codeword with a pair count of 0, and one of 15.
  expectSpoiledRead([](MemoryStore& s, const std::string& d) { *s.at<uint32_t>(d, 6) &= 0x0FFFFFFFu; },
                    "DICT", "pair count of 0");
  expectSpoiledRead([](MemoryStore& s, const std::string& d) { *s.at<uint32_t>(d, 6) |= 0xF0000000u; },
                    "DICT", "pair count of 15");
  // A pair symbol above 8.
  expectSpoiledRead([](MemoryStore& s, const std::string& d) { *s.at<uint32_t>(d, 0) |= 0xFu; }, "DICT",
                    "pair symbol 15");
  // An index past the dictionary's end.
  expectSpoiledRead([](MemoryStore& s, const std::string&) { *s.at<uint16_t>("w.stream", 2) = 65000; },
                    "w.stream", "out of range");
  // Row offsets that do not increase.
  expectSpoiledRead(
      [](MemoryStore& s, const std::string&) {
        *s.at<uint32_t>("w.row_offsets", 2) = *s.at<uint32_t>("w.row_offsets", 1);
      },
      "w.row_offsets", "not increasing");
  // A stream of the wrong dtype.
  expectSpoiledRead([](MemoryStore& s, const std::string&) { s.tensors.at("w.stream").dtype = DType::I16; },
                    "w.stream", "dtype");
}

std::vector<uint8_t> symbols(std::initializer_list<int> pairs) {
  return std::vector<uint8_t>(pairs.begin(), pairs.end());
}

TEST(TernaryDictionaryPayload, EncoderRefusesCodesTheDictionaryCannotSpell) {
  // Only the zero pair and the all-zero 2-pair word: a nonzero pair has no codeword.
  auto d =
      std::make_shared<TernaryDictionary>(std::vector<std::vector<uint8_t>>{symbols({4}), symbols({4, 4})});
  TernaryCodes c{1, 4, {0, 0, 1, 0}, {-1.0f}, {1.0f}};
  EXPECT_THROW(encodeWithDictionary(c, d), moewb::Error);
  c.codes = {0, 0, 0, 0};
  const auto p = encodeWithDictionary(c, d);
  EXPECT_EQ(p->stream(), (std::vector<uint16_t>{1}));  // the longest match
}

// --- Export and CompressedModel::read ---

std::shared_ptr<moewb::ModelCatalog> demoCatalog() {
  return std::make_shared<moewb::ModelCatalog>(moewb::Checkpoint::open(moewb::test::demoModelDir().string()));
}

// A codebook payload with the matrix's shape (random codes: this tests storage, not quality).
std::shared_ptr<const CodebookPayload> someCodebook(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  const int d = 4;
  const int64_t m = cols / d;
  CodebookStage a, b;
  a.clusters = 256;
  b.clusters = 16;
  b.codebook_bits = 6;
  for (int64_t i = 0; i < rows * m; ++i) {
    a.codes.push_back(uint16_t(rng() % 256));
    b.codes.push_back(uint16_t(rng() % 16));
  }
  std::normal_distribution<float> n(0.0f, 0.02f);
  for (int64_t i = 0; i < m * 256 * d; ++i) a.values.push_back(n(rng));
  for (int64_t i = 0; i < m * 16 * d; ++i) b.levels.push_back(uint16_t(rng() % 64));
  for (int64_t j = 0; j < m; ++j) {
    b.min.push_back(-0.005f);
    b.step.push_back(0.00015f);
  }
  return std::make_shared<CodebookPayload>(rows, cols, d, std::vector<CodebookStage>{a, b});
}

QuantizedMatrix withPayload(const moewb::ModelCatalog& c, std::size_t i,
                            std::shared_ptr<const MatrixPayload> p, const std::string& method) {
  QuantizedMatrix q;
  q.matrix = i;
  q.source = c.matrices()[i];
  q.method = method;
  q.payload = std::move(p);
  q.bytes = q.payload->storedBytes();
  q.original_bytes = int64_t(q.source.rows * q.source.cols * 4);
  q.rel_error = relativeError(c.readMatrix(q.source), q.payload->dequantize());
  return q;
}

struct PayloadExport {
  std::shared_ptr<moewb::ModelCatalog> catalog;
  ModelQuantization q;
  std::shared_ptr<const TernaryDictionary> dictionary;
  fs::path dir;
};

// One codebook matrix, two dictionary matrices sharing one dictionary, one HQQ matrix, exported.
PayloadExport writePayloadExport() {
  PayloadExport x;
  x.catalog = demoCatalog();
  std::vector<std::size_t> picked;
  for (std::size_t i : quantizableMatrices(*x.catalog))
    if (globMatch("model.layers.0.self_attn.*", x.catalog->matrices()[i].name) && picked.size() < 4)
      picked.push_back(i);
  EXPECT_EQ(picked.size(), 4u);
  const auto& mats = x.catalog->matrices();
  x.q.settings.method = "hqq";
  x.q.matrices.push_back(withPayload(*x.catalog, picked[0],
                                     someCodebook(mats[picked[0]].rows, mats[picked[0]].cols, 1), "pq-test"));
  x.dictionary = smallDictionary();
  for (int k : {1, 2}) {
    const auto& m = mats[picked[std::size_t(k)]];
    x.q.matrices.push_back(
        withPayload(*x.catalog, picked[std::size_t(k)],
                    encodeWithDictionary(randomTernary(m.rows, m.cols, 20 + k), x.dictionary), "qmoe-test"));
  }
  QuantizeSettings s;
  s.method = "hqq";
  const ModelQuantization grouped = quantizeModel(*x.catalog, s, {picked[3]}, {0});
  x.q.matrices.push_back(grouped.matrices.at(0));
  x.q.original_bytes = grouped.original_bytes;
  x.q.compressed_bytes = x.q.original_bytes + sharedPayloadBytes(x.q.matrices);
  for (const auto& m : x.q.matrices) x.q.compressed_bytes += m.bytes - m.original_bytes;
  x.dir = moewb::test::makeTempDir("moewb-payload-export") / "compressed";
  writeCompressedModel(*x.catalog, x.q, x.dir);
  return x;
}

TEST(PayloadExport, EachKindReopensIdenticallyBesideGroupedCodes) {
  const PayloadExport x = writePayloadExport();
  const auto model = CompressedModel::open(x.dir);
  const auto& tensors = model->manifest().at("tensors");
  ASSERT_EQ(tensors.size(), 4u);
  std::vector<std::shared_ptr<const TernaryDictionary>> read_dictionaries;
  for (const auto& m : x.q.matrices) {
    SCOPED_TRACE(m.source.name);
    const auto& e = tensors.at(m.source.name);
    if (m.payload) {
      EXPECT_EQ(e.at("payload"), std::string(m.payload->kind()));
      EXPECT_EQ(e.at("bytes").get<int64_t>(), m.payload->storedBytes());
      EXPECT_EQ(e.at("method"), m.method);
      EXPECT_EQ(e.at("rows").get<int64_t>(), m.source.rows);
      EXPECT_DOUBLE_EQ(e.at("rel_error").get<double>(), m.rel_error);
      // The entry's bytes are exactly its tensors' bytes.
      int64_t held = 0;
      for (const auto& t : model->checkpoint().tensors())
        if (t.name.starts_with(m.source.name + ".")) held += int64_t(t.nbytes);
      EXPECT_EQ(held, m.payload->storedBytes());
    } else {
      EXPECT_FALSE(e.contains("payload"));
      EXPECT_EQ(e.at("bits").get<int>(), m.base.bits);
    }
    const QuantizedMatrix back = model->read(m.source.name);
    EXPECT_EQ(bool(back.payload), bool(m.payload));
    EXPECT_EQ(back.bytes, m.bytes);
    EXPECT_EQ(dequantize(back), dequantize(m));
    if (auto d = std::dynamic_pointer_cast<const TernaryDictionaryPayload>(back.payload))
      read_dictionaries.push_back(d->dictionary());
  }
  // The shared dictionary: one tensor, named by both entries, listed once with its bytes, read once.
  const auto& shared = model->manifest().at("shared");
  ASSERT_EQ(shared.size(), 1u);
  const std::string dict_name = shared.begin().key();
  EXPECT_EQ(shared.begin().value().at("bytes").get<int64_t>(), x.dictionary->storedBytes());
  int dictionaries = 0;
  for (const auto& t : model->checkpoint().tensors())
    dictionaries += t.name.find("ternary_dictionary") != std::string::npos;
  EXPECT_EQ(dictionaries, 1);
  EXPECT_EQ(tensors.at(x.q.matrices[1].source.name).at("dictionary"), dict_name);
  EXPECT_EQ(tensors.at(x.q.matrices[2].source.name).at("dictionary"), dict_name);
  ASSERT_EQ(read_dictionaries.size(), 2u);
  EXPECT_EQ(read_dictionaries[0], read_dictionaries[1]);
  EXPECT_EQ(read_dictionaries[0]->words(), x.dictionary->words());
  // The model's size counts the dictionary once.
  EXPECT_EQ(model->manifest().at("compressed_bytes").get<int64_t>(), x.q.compressed_bytes);
  EXPECT_EQ(sharedPayloadBytes(x.q.matrices), x.dictionary->storedBytes());

  // `moewb eval --quantized DIR` loads the export through this variant: every matrix dequantized.
  const auto variant = moewb::engine::loadReplacementCheckpoint(x.catalog->checkpointPtr(), x.dir.string());
  EXPECT_EQ(variant.replaced_matrices, 4u);
  for (const auto& m : x.q.matrices)
    EXPECT_EQ(variant.weights->matrix(m.source.name), dequantize(m)) << m.source.name;
}

TEST(PayloadExport, AnUnknownPayloadKindIsRefusedByName) {
  const PayloadExport x = writePayloadExport();
  const fs::path manifest_path = x.dir / "manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(manifest_path));
  const std::string name = x.q.matrices[0].source.name;
  manifest["tensors"][name]["payload"] = "hyperbolic-lattice";
  std::ofstream(manifest_path) << manifest.dump(2);
  const auto model = CompressedModel::open(x.dir);
  try {
    model->read(name);
    ADD_FAILURE() << "an unknown payload kind was read";
  } catch (const moewb::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'hyperbolic-lattice'"), std::string::npos) << message;
    EXPECT_NE(message.find(name), std::string::npos) << message;
    EXPECT_NE(message.find("codebook"), std::string::npos) << "the known kinds are listed: " << message;
  }
  // The other matrices still read.
  EXPECT_NO_THROW(model->read(x.q.matrices[1].source.name));
}

// A kind that core does not know, added by this file alone: one fp16 value per row, repeated.
class RowConstantPayload final : public MatrixPayload {
 public:
  RowConstantPayload(int64_t cols, std::vector<float> values) : cols_(cols), values_(std::move(values)) {
    for (float& v : values_) v = half(v);
  }
  std::string_view kind() const override { return "row-constant"; }
  int64_t rows() const override { return int64_t(values_.size()); }
  int64_t cols() const override { return cols_; }
  MatrixRM dequantize() const override {
    MatrixRM w(rows(), cols_);
    for (int64_t r = 0; r < rows(); ++r) w.row(r).setConstant(values_[std::size_t(r)]);
    return w;
  }
  int64_t storedBytes() const override { return 2 * rows(); }
  void write(PayloadWriter& w, const std::string& key, nlohmann::json&) const override {
    w.addHalf(key + ".row_values", {rows()}, values_);
  }

 private:
  int64_t cols_;
  std::vector<float> values_;
};

const PayloadReaderRegistrar row_constant_reader("row-constant", [](const PayloadSource& s,
                                                                    const std::string& key,
                                                                    const nlohmann::json& e) {
  return std::make_shared<RowConstantPayload>(e.at("cols").get<int64_t>(), s.floats(key + ".row_values"));
});

TEST(PayloadExport, AKindRegisteredOutsideCoreIsWrittenAndRead) {
  const auto catalog = demoCatalog();
  const std::size_t i = quantizableMatrices(*catalog).front();
  const auto& m = catalog->matrices()[i];
  std::vector<float> values;
  for (int64_t r = 0; r < m.rows; ++r) values.push_back(0.001f * float(r));
  ModelQuantization q;
  q.settings.method = "hqq";
  q.matrices.push_back(withPayload(*catalog, i, std::make_shared<RowConstantPayload>(m.cols, values), "toy"));
  const fs::path dir = moewb::test::makeTempDir("moewb-payload-toy") / "out";
  writeCompressedModel(*catalog, q, dir);
  const auto model = CompressedModel::open(dir);
  EXPECT_EQ(model->manifest().at("tensors").at(m.name).at("payload"), "row-constant");
  EXPECT_FALSE(model->manifest().contains("shared"));
  EXPECT_EQ(model->dequantize(m.name), dequantize(q.matrices[0]));
  const auto kinds = payloadKinds();
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "row-constant"), kinds.end());
}

TEST(PayloadExport, APayloadWhoseBytesDisagreeWithItsTensorsIsNotWritten) {
  class Miscounted final : public MatrixPayload {
   public:
    explicit Miscounted(int64_t r, int64_t c) : r_(r), c_(c) {}
    std::string_view kind() const override { return "miscounted"; }
    int64_t rows() const override { return r_; }
    int64_t cols() const override { return c_; }
    MatrixRM dequantize() const override { return MatrixRM::Zero(r_, c_); }
    int64_t storedBytes() const override { return 4; }
    void write(PayloadWriter& w, const std::string& key, nlohmann::json&) const override {
      w.addHalf(key + ".x", {1}, std::vector<float>{0.0f});  // 2 bytes
    }

   private:
    int64_t r_, c_;
  };
  const auto catalog = demoCatalog();
  const std::size_t i = quantizableMatrices(*catalog).front();
  ModelQuantization q;
  q.settings.method = "hqq";
  const auto& m = catalog->matrices()[i];
  q.matrices.push_back(withPayload(*catalog, i, std::make_shared<Miscounted>(m.rows, m.cols), "toy"));
  const fs::path dir = moewb::test::makeTempDir("moewb-payload-miscounted") / "out";
  EXPECT_THROW(writeCompressedModel(*catalog, q, dir), moewb::Error);
  EXPECT_FALSE(fs::exists(dir));
}

}  // namespace

// SPDX-License-Identifier: MIT
#include "moewb/quant/payloads/ternary_dictionary.h"

#include <fmt/format.h>

#include <array>
#include <limits>
#include <queue>

#include "moewb/error.h"

namespace moewb::quant {

namespace {

constexpr int kPairsPerWord = 7;  // 4-bit pair symbols in bits [0, 28) of each word
constexpr uint32_t kSymbolBits = 0x0FFFFFFFu;

float roundToHalf(float x) {
  return halfToFloat(floatToHalf(x));
}

int64_t pairsPerRow(int64_t cols) {
  return (cols + 1) / 2;
}

}  // namespace

TernaryDictionary::TernaryDictionary(const std::vector<std::vector<uint8_t>>& entries,
                                     const std::string& tensor) {
  if (entries.empty() || int64_t(entries.size()) > kMaxEntries)
    throw Error(fmt::format("{}: {} codewords (expected 1..{})", tensor, entries.size(), kMaxEntries));
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (e.empty() || int(e.size()) > kMaxPairs)
      throw Error(
          fmt::format("{}: codeword {} has {} pairs (expected 1..{})", tensor, i, e.size(), kMaxPairs));
    for (uint8_t s : e)
      if (s > 8)
        throw Error(fmt::format("{}: codeword {} holds pair symbol {} (expected 0..8)", tensor, i, s));
    symbols_.insert(symbols_.end(), e.begin(), e.end());
    start_.push_back(uint32_t(symbols_.size()));
  }
}

std::shared_ptr<const TernaryDictionary> TernaryDictionary::fromWords(std::span<const uint32_t> words,
                                                                      const std::string& tensor) {
  if (words.empty() || words.size() % 2 != 0 || int64_t(words.size() / 2) > kMaxEntries)
    throw Error(fmt::format("{}: {} words (expected 2 per codeword, 1..{} codewords)", tensor, words.size(),
                            kMaxEntries));
  std::shared_ptr<TernaryDictionary> d(new TernaryDictionary());
  const std::size_t n = words.size() / 2;
  d->symbols_.reserve(n * 4);
  d->start_.reserve(n + 1);
  for (std::size_t i = 0; i < n; ++i) {
    const uint32_t w[2] = {words[2 * i], words[2 * i + 1]};
    const int pairs = int(w[0] >> 28);
    if (pairs < 1 || pairs > kMaxPairs)
      throw Error(fmt::format("{}: codeword {} has a pair count of {} (expected 1..{})", tensor, i, pairs,
                              kMaxPairs));
    if (w[1] & ~kSymbolBits)
      throw Error(fmt::format("{}: codeword {} has bits set in the reserved top 4 bits of its second word",
                              tensor, i));
    for (int p = 0; p < 2 * kPairsPerWord; ++p) {
      const uint32_t s = (w[p / kPairsPerWord] >> (4 * (p % kPairsPerWord))) & 0xFu;
      if (p >= pairs) {
        if (s != 0)
          throw Error(fmt::format("{}: codeword {} of {} pairs has a nonzero unused pair slot {}", tensor, i,
                                  pairs, p));
        continue;
      }
      if (s > 8)
        throw Error(fmt::format("{}: codeword {} holds pair symbol {} (expected 0..8)", tensor, i, s));
      d->symbols_.push_back(uint8_t(s));
    }
    d->start_.push_back(uint32_t(d->symbols_.size()));
  }
  return d;
}

std::vector<uint32_t> TernaryDictionary::words() const {
  std::vector<uint32_t> out(std::size_t(2 * size()), 0u);
  for (int64_t i = 0; i < size(); ++i) {
    const auto e = entry(i);
    uint32_t* w = out.data() + 2 * i;
    for (std::size_t p = 0; p < e.size(); ++p)
      w[p / kPairsPerWord] |= uint32_t(e[p]) << (4 * (p % kPairsPerWord));
    w[0] |= uint32_t(e.size()) << 28;
  }
  return out;
}

TernaryDictionaryPayload::TernaryDictionaryPayload(int64_t rows, int64_t cols,
                                                   std::shared_ptr<const TernaryDictionary> dictionary,
                                                   std::vector<uint16_t> stream,
                                                   std::vector<uint32_t> row_offsets, std::vector<float> lo,
                                                   std::vector<float> hi, const TernaryPartNames& names)
    : rows_(rows),
      cols_(cols),
      dictionary_(std::move(dictionary)),
      stream_(std::move(stream)),
      offsets_(std::move(row_offsets)),
      lo_(std::move(lo)),
      hi_(std::move(hi)) {
  if (rows_ <= 0 || cols_ <= 0 || !dictionary_)
    throw Error(fmt::format("dictionary payload: a {}x{} matrix{}", rows_, cols_,
                            dictionary_ ? "" : " without a dictionary"));
  if (int64_t(offsets_.size()) != rows_ + 1)
    throw Error(fmt::format("{}: {} row offsets for {} rows (expected rows + 1)", names.offsets,
                            offsets_.size(), rows_));
  if (offsets_.front() != 0)
    throw Error(fmt::format("{}: the first row offset is {} (expected 0)", names.offsets, offsets_.front()));
  for (int64_t r = 0; r < rows_; ++r)
    if (offsets_[std::size_t(r + 1)] <= offsets_[std::size_t(r)])
      throw Error(fmt::format("{}: offsets not increasing at row {} ({} then {}; every row holds a codeword)",
                              names.offsets, r, offsets_[std::size_t(r)], offsets_[std::size_t(r + 1)]));
  if (offsets_.back() != stream_.size())
    throw Error(fmt::format("{}: the last row ends at {} but the stream holds {} indices", names.offsets,
                            offsets_.back(), stream_.size()));
  const int64_t entries = dictionary_->size();
  const int64_t want = pairsPerRow(cols_);
  for (int64_t r = 0; r < rows_; ++r) {
    int64_t pairs = 0;
    for (uint32_t k = offsets_[std::size_t(r)]; k < offsets_[std::size_t(r + 1)]; ++k) {
      if (stream_[k] >= entries)
        throw Error(
            fmt::format("{}: index {} at position {} (row {}) is out of range of a {}-codeword dictionary",
                        names.stream, stream_[k], k, r, entries));
      pairs += int64_t(dictionary_->entry(stream_[k]).size());
    }
    if (pairs != want)
      throw Error(fmt::format("{}: row {} decodes to {} pairs (expected {} for {} columns)", names.stream, r,
                              pairs, want, cols_));
  }
  if (int64_t(lo_.size()) != rows_ || int64_t(hi_.size()) != rows_)
    throw Error(
        fmt::format("{}: {}/{} lo/hi values for {} rows", names.scales, lo_.size(), hi_.size(), rows_));
  for (float& v : lo_) v = roundToHalf(v);
  for (float& v : hi_) v = roundToHalf(v);
}

std::vector<int8_t> TernaryDictionaryPayload::decodeTernaryCodes(int64_t row) const {
  if (row < 0 || row >= rows_) throw Error(fmt::format("dictionary payload: row {} of {}", row, rows_));
  std::vector<int8_t> out;
  out.reserve(std::size_t(2 * pairsPerRow(cols_)));
  for (uint32_t k = offsets_[std::size_t(row)]; k < offsets_[std::size_t(row + 1)]; ++k)
    for (uint8_t s : dictionary_->entry(stream_[k])) {
      out.push_back(int8_t(ternaryPairFirst(s)));
      out.push_back(int8_t(ternaryPairSecond(s)));
    }
  out.resize(std::size_t(cols_));  // an odd row's padding weight goes
  return out;
}

MatrixRM TernaryDictionaryPayload::dequantize() const {
  MatrixRM out(rows_, cols_);
  for (int64_t r = 0; r < rows_; ++r) {
    const std::vector<int8_t> codes = decodeTernaryCodes(r);
    const float values[3] = {lo_[std::size_t(r)], 0.0f, hi_[std::size_t(r)]};
    for (int64_t c = 0; c < cols_; ++c) out(r, c) = values[codes[std::size_t(c)] + 1];
  }
  return out;
}

int64_t TernaryDictionaryPayload::storedBytes() const {
  return 2 * int64_t(stream_.size()) + 4 * (rows_ + 1) + 2 * 2 * rows_;
}

std::vector<MatrixPayload::SharedPart> TernaryDictionaryPayload::sharedParts() const {
  return {SharedPart{dictionary_, dictionary_->storedBytes()}};
}

void TernaryDictionaryPayload::write(PayloadWriter& writer, const std::string& key,
                                     nlohmann::json& entry) const {
  const std::string dict_name = writer.sharedTensor(
      dictionary_.get(), TernaryDictionary::kNameHint, [&](PayloadWriter& w, const std::string& name) {
        w.addValues(name, DType::U32, {dictionary_->size(), 2}, dictionary_->words());
      });
  entry["dictionary"] = dict_name;
  entry["dictionary_entries"] = dictionary_->size();
  writer.addValues(key + ".stream", DType::U16, {int64_t(stream_.size())}, stream_);
  writer.addValues(key + ".row_offsets", DType::U32, {rows_ + 1}, offsets_);
  std::vector<float> scales(static_cast<std::size_t>(2 * rows_));
  for (int64_t r = 0; r < rows_; ++r) {
    scales[std::size_t(2 * r)] = lo_[std::size_t(r)];
    scales[std::size_t(2 * r + 1)] = hi_[std::size_t(r)];
  }
  writer.addHalf(key + ".row_scales", {rows_, 2}, scales);
}

namespace {

void checkCodes(const TernaryCodes& codes, std::string_view who) {
  if (codes.rows <= 0 || codes.cols <= 0 || int64_t(codes.codes.size()) != codes.rows * codes.cols)
    throw Error(fmt::format("{}: {} codes for a {}x{} matrix", who, codes.codes.size(), codes.rows, codes.cols));
}

// Row r's pair symbols into `out` [ceil(cols / 2)].
void rowPairs(const TernaryCodes& codes, int64_t r, uint8_t* out, std::string_view who) {
  const int8_t* c = codes.codes.data() + r * codes.cols;
  const int64_t pairs = pairsPerRow(codes.cols);
  for (int64_t p = 0; p < pairs; ++p) {
    const int a = c[2 * p], b = 2 * p + 1 < codes.cols ? c[2 * p + 1] : 0;
    if (a < -1 || a > 1 || b < -1 || b > 1)
      throw Error(fmt::format("{}: row {} holds a code outside -1, 0, +1", who, r));
    out[p] = ternaryPairSymbol(a, b);
  }
}

}  // namespace

std::array<uint64_t, 9> countTernaryPairs(const TernaryCodes& codes) {
  checkCodes(codes, "countTernaryPairs");
  std::array<uint64_t, 9> counts{};
  std::vector<uint8_t> row(static_cast<std::size_t>(pairsPerRow(codes.cols)));
  for (int64_t r = 0; r < codes.rows; ++r) {
    rowPairs(codes, r, row.data(), "countTernaryPairs");
    for (uint8_t s : row) ++counts[s];
  }
  return counts;
}

std::shared_ptr<const TernaryDictionary> learnTernaryDictionary(const std::array<uint64_t, 9>& pair_counts,
                                                                int64_t entries, int max_pairs) {
  if (entries < 9 || entries > TernaryDictionary::kMaxEntries)
    throw Error(fmt::format("learnTernaryDictionary: {} codewords (expected 9..{})", entries,
                            TernaryDictionary::kMaxEntries));
  if (max_pairs < 1 || max_pairs > TernaryDictionary::kMaxPairs)
    throw Error(fmt::format("learnTernaryDictionary: codewords of up to {} pairs (expected 1..{})", max_pairs,
                            TernaryDictionary::kMaxPairs));
  double total = 0;
  for (uint64_t n : pair_counts) total += double(n);
  if (total <= 0) throw Error("learnTernaryDictionary: no pair was counted (all 9 counts are 0)");
  std::array<double, 9> prob{};
  for (int s = 0; s < 9; ++s) prob[std::size_t(s)] = double(pair_counts[std::size_t(s)]) / total;

  // Codewords as a tree: node i extends node parent[i] by one pair (parent -1: a single pair).
  struct Node {
    int32_t parent;
    uint8_t symbol, length;
  };
  struct Candidate {
    double probability;
    uint64_t order;  // push order: ties go to the earlier push, so the result is deterministic
    int32_t parent;
    uint8_t symbol, length;
    bool operator<(const Candidate& o) const {  // std::priority_queue pops the largest
      return probability != o.probability ? probability < o.probability : order > o.order;
    }
  };
  std::vector<Node> nodes;
  std::vector<double> node_prob;
  std::priority_queue<Candidate> queue;
  uint64_t pushed = 0;
  auto extend = [&](int32_t parent) {
    const Node& n = nodes[std::size_t(parent)];
    if (n.length >= max_pairs) return;
    for (int s = 0; s < 9; ++s) {
      const double p = node_prob[std::size_t(parent)] * prob[std::size_t(s)];
      if (p > 0) queue.push({p, pushed++, parent, uint8_t(s), uint8_t(n.length + 1)});
    }
  };
  for (int s = 0; s < 9; ++s) {
    nodes.push_back({-1, uint8_t(s), 1});
    node_prob.push_back(prob[std::size_t(s)]);
  }
  for (int32_t s = 0; s < 9; ++s)
    if (node_prob[std::size_t(s)] > 0) extend(s);
  while (int64_t(nodes.size()) < entries && !queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    nodes.push_back({c.parent, c.symbol, c.length});
    node_prob.push_back(c.probability);
    extend(int32_t(nodes.size() - 1));
  }
  std::vector<std::vector<uint8_t>> words(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    std::vector<uint8_t>& w = words[i];
    w.resize(nodes[i].length);
    for (int32_t at = int32_t(i), k = nodes[i].length - 1; at >= 0; at = nodes[std::size_t(at)].parent, --k)
      w[std::size_t(k)] = nodes[std::size_t(at)].symbol;
  }
  return std::make_shared<const TernaryDictionary>(words, "learned ternary dictionary");
}

TernaryEncoder::TernaryEncoder(std::shared_ptr<const TernaryDictionary> dictionary)
    : dictionary_(std::move(dictionary)) {
  if (!dictionary_) throw Error("TernaryEncoder: no dictionary");
  next_.assign(9, -1);
  word_.assign(1, -1);
  for (int64_t i = 0; i < dictionary_->size(); ++i) {
    int32_t at = 0;
    for (uint8_t s : dictionary_->entry(i)) {
      int32_t& child = next_[std::size_t(at) * 9 + s];
      if (child < 0) {
        child = int32_t(word_.size());
        word_.push_back(-1);
        next_.insert(next_.end(), 9, -1);
      }
      at = next_[std::size_t(at) * 9 + s];
    }
    if (word_[std::size_t(at)] < 0) word_[std::size_t(at)] = int32_t(i);  // first of duplicates
  }
}

std::shared_ptr<const TernaryDictionaryPayload> TernaryEncoder::encode(const TernaryCodes& codes) const {
  checkCodes(codes, "encodeWithDictionary");
  const int64_t pairs = pairsPerRow(codes.cols);
  std::vector<uint16_t> stream;
  stream.reserve(std::size_t(codes.rows * (pairs / 4 + 1)));
  std::vector<uint32_t> offsets{0};
  offsets.reserve(std::size_t(codes.rows + 1));
  std::vector<uint8_t> row(static_cast<std::size_t>(pairs));
  const int32_t* next = next_.data();
  for (int64_t r = 0; r < codes.rows; ++r) {
    rowPairs(codes, r, row.data(), "encodeWithDictionary");
    for (int64_t p = 0; p < pairs;) {
      int32_t at = 0, best = -1;
      int64_t best_len = 0;
      for (int64_t q = p; q < pairs; ++q) {
        at = next[std::size_t(at) * 9 + row[std::size_t(q)]];
        if (at < 0) break;
        if (word_[std::size_t(at)] >= 0) {
          best = word_[std::size_t(at)];
          best_len = q - p + 1;
        }
      }
      if (best < 0)
        throw Error(fmt::format("encodeWithDictionary: no codeword matches row {} at pair {} ({}, {})", r, p,
                                ternaryPairFirst(row[std::size_t(p)]),
                                ternaryPairSecond(row[std::size_t(p)])));
      stream.push_back(uint16_t(best));
      p += best_len;
    }
    if (stream.size() > std::numeric_limits<uint32_t>::max())
      throw Error(fmt::format("encodeWithDictionary: more than 2^32 codewords in a {}x{} matrix", codes.rows,
                              codes.cols));
    offsets.push_back(uint32_t(stream.size()));
  }
  return std::make_shared<TernaryDictionaryPayload>(codes.rows, codes.cols, dictionary_, std::move(stream),
                                                    std::move(offsets), codes.lo, codes.hi);
}

std::shared_ptr<const TernaryDictionaryPayload> encodeWithDictionary(
    const TernaryCodes& codes, std::shared_ptr<const TernaryDictionary> dictionary) {
  if (!dictionary) throw Error("encodeWithDictionary: no dictionary");
  return TernaryEncoder(std::move(dictionary)).encode(codes);
}

std::shared_ptr<const MatrixPayload> readTernaryDictionaryPayload(const PayloadSource& source,
                                                                  const std::string& key,
                                                                  const nlohmann::json& entry) {
  auto integer = [&](const char* name) {
    if (!entry.contains(name) || !entry.at(name).is_number_integer())
      throw Error(
          fmt::format("{}: its dictionary entry lacks the integer \"{}\"", source.describe(key), name));
    return entry.at(name).get<int64_t>();
  };
  const int64_t rows = integer("rows"), cols = integer("cols");
  if (!entry.contains("dictionary") || !entry.at("dictionary").is_string())
    throw Error(fmt::format("{}: its dictionary entry names no \"dictionary\" tensor", source.describe(key)));
  const std::string dict_name = entry.at("dictionary").get<std::string>();
  const auto dictionary = source.shared<TernaryDictionary>(dict_name, [&] {
    return TernaryDictionary::fromWords(source.values<uint32_t>(dict_name, DType::U32),
                                        source.describe(dict_name));
  });
  if (entry.contains("dictionary_entries") && integer("dictionary_entries") != dictionary->size())
    source.fail(dict_name, fmt::format("holds {} codewords; the entry of '{}' expects {}", dictionary->size(),
                                       key, integer("dictionary_entries")));
  if (rows <= 0 || cols <= 0)
    throw Error(fmt::format("{}: a {}x{} matrix", source.describe(key), rows, cols));
  const std::string stream_name = key + ".stream", offsets_name = key + ".row_offsets",
                    scales_name = key + ".row_scales";
  auto stream = source.values<uint16_t>(stream_name, DType::U16);
  auto offsets = source.values<uint32_t>(offsets_name, DType::U32, rows + 1);
  const std::vector<float> scales = source.floats(scales_name);
  if (source.dtype(scales_name) != DType::F16 || int64_t(scales.size()) != 2 * rows)
    source.fail(scales_name, fmt::format("expected F16 [{}, 2] (lo, hi per row)", rows));
  std::vector<float> lo(static_cast<std::size_t>(rows)), hi(static_cast<std::size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    lo[std::size_t(r)] = scales[std::size_t(2 * r)];
    hi[std::size_t(r)] = scales[std::size_t(2 * r + 1)];
  }
  TernaryPartNames names{source.describe(stream_name), source.describe(offsets_name),
                         source.describe(scales_name)};
  return std::make_shared<TernaryDictionaryPayload>(rows, cols, dictionary, std::move(stream),
                                                    std::move(offsets), std::move(lo), std::move(hi), names);
}

}  // namespace moewb::quant

// SPDX-License-Identifier: MIT
#pragma once
// QMoE's sub-1-bit code: every weight is a ternary code in {-1, 0, +1} times its row's pair of fp16
// values (lo for -1, hi for +1; QMoE's {min*alpha, 0, max*alpha}). The codes of a row are taken in
// pairs (9 symbols) and the pair sequence is written as indices into a dictionary of up to 2^16
// codewords, each 1..14 pairs long. The dictionary is one object shared by many matrices (written once
// per export); each matrix keeps its u16 index stream with per-row offsets, so rows decode on their own.
// Tensors and the exact bit layout: docs/export-format.md.
//
// This file holds the stored form, an exact decoder, QMoE's dictionary construction from pair
// statistics (learnTernaryDictionary) and the greedy longest-match encoder (TernaryEncoder).
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "moewb/quant/payload.h"

namespace moewb::quant {

// A pair of ternary codes (a, b) as one symbol 0..8: 3 * (a + 1) + (b + 1).
constexpr uint8_t ternaryPairSymbol(int a, int b) {
  return uint8_t(3 * (a + 1) + (b + 1));
}
constexpr int ternaryPairFirst(uint8_t symbol) {
  return symbol / 3 - 1;
}
constexpr int ternaryPairSecond(uint8_t symbol) {
  return symbol % 3 - 1;
}

class TernaryDictionary {
 public:
  static constexpr int64_t kMaxEntries = 65536;  // indices are u16
  static constexpr int kMaxPairs = 14;           // pairs per codeword (4 bits each in 2 x u32)
  static constexpr const char* kNameHint = "moewb.shared.ternary_dictionary";

  // Codewords as pair symbols (0..8), 1..kMaxPairs each. Throws moewb::Error naming `tensor` and the
  // entry at fault.
  explicit TernaryDictionary(const std::vector<std::vector<uint8_t>>& entries,
                             const std::string& tensor = "ternary dictionary");
  // From the stored form: 2 little-endian u32 per entry (docs/export-format.md). Every entry is checked
  // (pair count 1..14, symbols 0..8, unused bits zero); errors name `tensor`.
  static std::shared_ptr<const TernaryDictionary> fromWords(std::span<const uint32_t> words,
                                                            const std::string& tensor);
  std::vector<uint32_t> words() const;

  int64_t size() const { return int64_t(start_.size()) - 1; }
  std::span<const uint8_t> entry(int64_t i) const {
    return {symbols_.data() + start_[std::size_t(i)],
            std::size_t(start_[std::size_t(i) + 1] - start_[std::size_t(i)])};
  }
  int64_t storedBytes() const { return 8 * size(); }

 private:
  TernaryDictionary() = default;
  std::vector<uint8_t> symbols_;    // all codewords' pair symbols, one after another
  std::vector<uint32_t> start_{0};  // codeword i is symbols_[start_[i], start_[i+1])
};

// How validation errors name a dictionary payload's parts (the export reader passes
// "FILE: tensor 'NAME.stream'", ...).
struct TernaryPartNames {
  std::string stream = "stream", offsets = "row_offsets", scales = "row_scales";
};

class TernaryDictionaryPayload final : public MatrixPayload {
 public:
  static constexpr std::string_view kKind = "dictionary";

  // `row_offsets` [rows + 1]: row r's codewords are stream[row_offsets[r], row_offsets[r+1]), which
  // must hold exactly ceil(cols / 2) pairs; `lo`, `hi` [rows] (rounded to fp16 here). Throws
  // moewb::Error naming the part at fault (index out of range, offsets not increasing, wrong length).
  TernaryDictionaryPayload(int64_t rows, int64_t cols, std::shared_ptr<const TernaryDictionary> dictionary,
                           std::vector<uint16_t> stream, std::vector<uint32_t> row_offsets,
                           std::vector<float> lo, std::vector<float> hi, const TernaryPartNames& names = {});

  std::string_view kind() const override { return kKind; }
  int64_t rows() const override { return rows_; }
  int64_t cols() const override { return cols_; }
  const std::shared_ptr<const TernaryDictionary>& dictionary() const { return dictionary_; }
  const std::vector<uint16_t>& stream() const { return stream_; }
  const std::vector<uint32_t>& rowOffsets() const { return offsets_; }
  const std::vector<float>& lo() const { return lo_; }
  const std::vector<float>& hi() const { return hi_; }

  // Row r's ternary codes (cols values in {-1, 0, +1}); the padding weight of an odd row is dropped.
  std::vector<int8_t> decodeTernaryCodes(int64_t row) const;
  MatrixRM dequantize() const override;
  // Stream (2 bytes per index) + offsets (4 * (rows + 1)) + row scales (4 * rows). The dictionary is
  // not counted here: it is a shared part, counted once per export (sharedParts()).
  int64_t storedBytes() const override;
  void write(PayloadWriter& writer, const std::string& key, nlohmann::json& manifest_entry) const override;
  std::vector<SharedPart> sharedParts() const override;

 private:
  int64_t rows_ = 0, cols_ = 0;
  std::shared_ptr<const TernaryDictionary> dictionary_;
  std::vector<uint16_t> stream_;
  std::vector<uint32_t> offsets_;
  std::vector<float> lo_, hi_;
};

// A ternary matrix before dictionary coding: codes [rows, cols] row-major in {-1, 0, +1} and the
// per-row values of -1 (lo) and +1 (hi).
struct TernaryCodes {
  int64_t rows = 0, cols = 0;
  std::vector<int8_t> codes;
  std::vector<float> lo, hi;
};

// How often each pair symbol 0..8 occurs in `codes` as stored (an odd row's last pair padded with 0).
// Throws moewb::Error on a code outside -1, 0, +1 or a size that does not match rows x cols.
std::array<uint64_t, 9> countTernaryPairs(const TernaryCodes& codes);

// QMoE's dictionary construction (a Tunstall code over pair symbols): the pairs are modelled as
// independent with the probabilities `pair_counts` / their sum; a priority queue holds candidate
// codewords by probability, starting with the 9 single pairs; the most probable is popped, becomes the
// next codeword and, when shorter than `max_pairs`, pushes its 9 one-pair extensions (probability times
// that pair's). It stops at `entries` codewords or when no candidate of nonzero probability is left.
// Every single pair is a codeword even when its count is 0 (indices 0..8 are the pairs themselves), so
// any matrix encodes; the dictionary is prefix-closed, so greedy longest match walks one tree. Ties go
// to the candidate pushed first. Throws moewb::Error on counts that are all zero, entries outside
// 9..65536 or max_pairs outside 1..14.
std::shared_ptr<const TernaryDictionary> learnTernaryDictionary(const std::array<uint64_t, 9>& pair_counts,
                                                                int64_t entries = TernaryDictionary::kMaxEntries,
                                                                int max_pairs = TernaryDictionary::kMaxPairs);

// Greedy longest match through a trie of a dictionary's codewords (built once, for any number of
// matrices), row by row (an odd row's last pair is padded with a 0). Any dictionary works, prefix-closed
// or not (the longest codeword seen on the way down is taken).
class TernaryEncoder {
 public:
  explicit TernaryEncoder(std::shared_ptr<const TernaryDictionary> dictionary);
  // Throws moewb::Error on a code outside -1, 0, +1, a size mismatch, or when no codeword starts with
  // some pair of the matrix (a dictionary holding the 9 single pairs encodes anything).
  std::shared_ptr<const TernaryDictionaryPayload> encode(const TernaryCodes& codes) const;
  const std::shared_ptr<const TernaryDictionary>& dictionary() const { return dictionary_; }

 private:
  std::shared_ptr<const TernaryDictionary> dictionary_;
  std::vector<int32_t> next_;  // [node * 9 + symbol]: child node or -1; node 0 is the root
  std::vector<int32_t> word_;  // [node]: the codeword ending there (first of duplicates) or -1
};

// TernaryEncoder(dictionary).encode(codes).
std::shared_ptr<const TernaryDictionaryPayload> encodeWithDictionary(
    const TernaryCodes& codes, std::shared_ptr<const TernaryDictionary> dictionary);

// The reader of kind "dictionary" (registered with the built-in payload kinds).
std::shared_ptr<const MatrixPayload> readTernaryDictionaryPayload(const PayloadSource& source,
                                                                  const std::string& key,
                                                                  const nlohmann::json& manifest_entry);

}  // namespace moewb::quant

// SPDX-License-Identifier: MIT
// QET's entanglement (per-row reorder) and its stored form, the "qet" payload kind: per stage the packed
// indicator bits and one codebook payload over the reordered residual (docs/export-format.md).
//
// Why a payload kind of its own rather than a reorder inside the codebook payload: QET's stages carry
// different reorders (stage 0 is entangled over l levels, the residual stages are not), so the reorder
// must be undone per stage before the stages are summed; the codebook payload's single "undo after the
// sum" cannot express that. Each stage reuses the codebook payload's tensors and reader unchanged.
#include <fmt/format.h>

#include "moewb/error.h"
#include "moewb/methods/qet.h"

namespace moewb::methods::qet {

namespace {

void checkLevels(int64_t cols, int levels) {
  if (levels < 0 || levels > 16 || cols % (int64_t(1) << levels) != 0)
    throw Error(fmt::format("qet: {} entanglement levels need the columns ({}) divisible by 2^{}", levels,
                            cols, levels));
}

// Indicator bits are packed one per bit, 32 per little-endian word, value i of a word in bit i (the 1-bit
// case of quant::packBits).
std::vector<uint8_t> unpackIndicatorBits(std::span<const uint32_t> words, int64_t count) {
  std::vector<uint8_t> bits(std::size_t(count), 0);
  for (int64_t i = 0; i < count; ++i)
    bits[std::size_t(i)] = uint8_t((words[std::size_t(i / 32)] >> (i % 32)) & 1u);
  return bits;
}

int64_t indicatorWords(int64_t rows, int64_t cols, int levels) {
  return (rows * indicatorBitsPerRow(cols, levels) + 31) / 32;
}

}  // namespace

int64_t indicatorBitsPerRow(int64_t cols, int levels) {
  return int64_t(levels) * cols / 2;
}

Entangled entangle(const MatrixRM& x, int levels) {
  const int64_t rows = x.rows(), cols = x.cols();
  checkLevels(cols, levels);
  Entangled e;
  e.reordered = x;
  const int64_t per_row = indicatorBitsPerRow(cols, levels);
  e.bits.resize(std::size_t(rows * per_row));
  std::vector<float> tmp(static_cast<std::size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = e.reordered.data() + r * cols;
    uint8_t* bit = e.bits.data() + r * per_row;
    // Level t splits each of its 2^t blocks into [S | L]; splitting breadth-first gives the same layout
    // as the recursion on S and L.
    for (int t = 0; t < levels; ++t) {
      const int64_t block = cols >> t, half = block / 2;
      for (int64_t b = 0; b < (int64_t(1) << t); ++b) {
        float* p = row + b * block;
        std::copy(p, p + block, tmp.begin());
        for (int64_t j = 0; j < half; ++j) {
          const float left = tmp[std::size_t(2 * j)], right = tmp[std::size_t(2 * j + 1)];
          const bool left_smaller = left < right;
          // The values are moved, never recomputed: the merge puts back the same bits (also -0/+0, NaN).
          p[j] = left_smaller ? left : right;
          p[half + j] = left_smaller ? right : left;
          *bit++ = left_smaller ? 1 : 0;
        }
      }
    }
  }
  return e;
}

MatrixRM disentangle(const MatrixRM& reordered, int levels, std::span<const uint8_t> bits) {
  const int64_t rows = reordered.rows(), cols = reordered.cols();
  checkLevels(cols, levels);
  const int64_t per_row = indicatorBitsPerRow(cols, levels);
  if (int64_t(bits.size()) != rows * per_row)
    throw Error(fmt::format("qet: {} indicator bits for a {}x{} matrix of {} levels (expected {})",
                            bits.size(), rows, cols, levels, rows * per_row));
  MatrixRM out = reordered;
  std::vector<float> tmp(static_cast<std::size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = out.data() + r * cols;
    for (int t = levels - 1; t >= 0; --t) {
      const int64_t block = cols >> t, half = block / 2;
      const uint8_t* bit = bits.data() + r * per_row + int64_t(t) * (cols / 2);
      for (int64_t b = 0; b < (int64_t(1) << t); ++b) {
        float* p = row + b * block;
        std::copy(p, p + block, tmp.begin());
        for (int64_t j = 0; j < half; ++j) {
          const float smaller = tmp[std::size_t(j)], larger = tmp[std::size_t(half + j)];
          const bool left_smaller = bit[b * half + j] != 0;
          p[2 * j] = left_smaller ? smaller : larger;
          p[2 * j + 1] = left_smaller ? larger : smaller;
        }
      }
    }
  }
  return out;
}

QetPayload::QetPayload(int64_t rows, int64_t cols, std::vector<PayloadStage> stages)
    : rows_(rows), cols_(cols), stages_(std::move(stages)) {
  if (stages_.empty()) throw Error("qet payload: no stage");
  for (std::size_t s = 0; s < stages_.size(); ++s) {
    const PayloadStage& st = stages_[s];
    checkLevels(cols, st.levels);
    if (!st.codebook || st.codebook->rows() != rows || st.codebook->cols() != cols)
      throw Error(fmt::format("qet payload, stage {}: its codebook is not {}x{}", s, rows, cols));
    if (int64_t(st.indicators.size()) != indicatorWords(rows, cols, st.levels))
      throw Error(fmt::format(
          "qet payload, stage {}: {} indicator words for {} levels of a {}x{} matrix (expected {})", s,
          st.indicators.size(), st.levels, rows, cols, indicatorWords(rows, cols, st.levels)));
  }
}

MatrixRM QetPayload::dequantize() const {
  MatrixRM out = MatrixRM::Zero(rows_, cols_);
  for (const PayloadStage& st : stages_) {
    const auto bits = unpackIndicatorBits(st.indicators, rows_ * indicatorBitsPerRow(cols_, st.levels));
    out += disentangle(st.codebook->dequantize(), st.levels, bits);
  }
  return out;
}

int64_t QetPayload::indicatorBytes(std::size_t stage) const {
  return 4 * int64_t(stages_.at(stage).indicators.size());
}

int64_t QetPayload::storedBytes() const {
  int64_t total = 0;
  for (std::size_t s = 0; s < stages_.size(); ++s)
    total += indicatorBytes(s) + stages_[s].codebook->storedBytes();
  return total;
}

void QetPayload::write(quant::PayloadWriter& writer, const std::string& key, nlohmann::json& entry) const {
  entry["subspace_width"] = stages_.front().codebook->subspaceWidth();
  entry["stages"] = nlohmann::json::array();
  for (std::size_t s = 0; s < stages_.size(); ++s) {
    const PayloadStage& st = stages_[s];
    const std::string stage_key = fmt::format("{}.stage{}", key, s);
    nlohmann::json codebook_entry;
    st.codebook->write(writer, stage_key, codebook_entry);
    nlohmann::json js = codebook_entry.at("stages").at(0);
    js["levels"] = st.levels;
    js["subspace_width"] = st.codebook->subspaceWidth();
    entry["stages"].push_back(js);
    if (st.levels > 0)
      writer.addValues(stage_key + ".indicators", DType::U32, {int64_t(st.indicators.size())}, st.indicators);
  }
}

std::shared_ptr<const quant::MatrixPayload> readQetPayload(const quant::PayloadSource& source,
                                                           const std::string& key,
                                                           const nlohmann::json& entry) {
  auto integer = [&](const nlohmann::json& j, const char* name) {
    if (!j.contains(name) || !j.at(name).is_number_integer())
      throw Error(fmt::format("{}: its qet entry lacks the integer \"{}\"", source.describe(key), name));
    return j.at(name).get<int64_t>();
  };
  const int64_t rows = integer(entry, "rows"), cols = integer(entry, "cols");
  if (!entry.contains("stages") || !entry.at("stages").is_array() || entry.at("stages").empty())
    throw Error(fmt::format("{}: its qet entry lists no \"stages\"", source.describe(key)));
  std::vector<PayloadStage> stages;
  for (std::size_t s = 0; s < entry.at("stages").size(); ++s) {
    const auto& js = entry.at("stages").at(s);
    const std::string stage_key = fmt::format("{}.stage{}", key, s);
    PayloadStage st;
    st.levels = int(integer(js, "levels"));
    const std::string indicators = stage_key + ".indicators";
    if (st.levels < 0 || st.levels > 16 || cols % (int64_t(1) << st.levels) != 0)
      source.fail(indicators, fmt::format("{} levels do not divide {} columns", st.levels, cols));
    if (st.levels > 0)
      st.indicators = source.values<uint32_t>(indicators, DType::U32, indicatorWords(rows, cols, st.levels));
    const nlohmann::json codebook_entry = {
        {"rows", rows},
        {"cols", cols},
        {"subspace_width", integer(js, "subspace_width")},
        {"stages", nlohmann::json::array({{{"clusters", integer(js, "clusters")},
                                           {"code_bits", integer(js, "code_bits")},
                                           {"codebook_bits", integer(js, "codebook_bits")}}})}};
    st.codebook = std::dynamic_pointer_cast<const quant::CodebookPayload>(
        quant::readCodebookPayload(source, stage_key, codebook_entry));
    stages.push_back(std::move(st));
  }
  return std::make_shared<QetPayload>(rows, cols, std::move(stages));
}

// Registered when this file is linked (the qet method's code references it).
static const quant::PayloadReaderRegistrar qet_reader(std::string(QetPayload::kKind), &readQetPayload);

}  // namespace moewb::methods::qet

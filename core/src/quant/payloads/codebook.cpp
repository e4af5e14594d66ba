// SPDX-License-Identifier: MIT
#include "moewb/quant/payloads/codebook.h"

#include <fmt/format.h>

#include <bit>

#include "moewb/error.h"

namespace moewb::quant {

namespace {

float roundToHalf(float x) {
  return halfToFloat(floatToHalf(x));
}

// The dtype of a stage's packed codes: one U8 / U16 per code at 8 / 16 bits, else U32 words.
DType codeWordType(int bits) {
  return bits == 8 ? DType::U8 : bits == 16 ? DType::U16 : DType::U32;
}

int64_t packedCodeBytes(int64_t count, int bits) {
  if (bits == 8) return count;
  if (bits == 16) return 2 * count;
  return 4 * packedWordCount(count, bits);
}

// Codebook entries as float [m * k * d]: what dequantization adds.
std::vector<float> codebookValues(const CodebookStage& s, int64_t m, int d) {
  if (s.codebook_bits == 0) return s.values;
  std::vector<float> out(s.levels.size());
  const int64_t per_subspace = int64_t(s.clusters) * d;
  for (int64_t j = 0; j < m; ++j)
    for (int64_t i = 0; i < per_subspace; ++i) {
      const std::size_t at = std::size_t(j * per_subspace + i);
      out[at] = s.min[std::size_t(j)] + float(s.levels[at]) * s.step[std::size_t(j)];
    }
  return out;
}

}  // namespace

int CodebookStage::codeBits() const {
  return clusters <= 2 ? 1 : int(std::bit_width(unsigned(clusters - 1)));
}

float CodebookStage::entry(int64_t j, int64_t c, int64_t t, int subspace_width) const {
  const std::size_t at = std::size_t((j * clusters + c) * subspace_width + t);
  if (codebook_bits == 0) return values[at];
  return min[std::size_t(j)] + float(levels[at]) * step[std::size_t(j)];
}

CodebookPayload::CodebookPayload(int64_t rows, int64_t cols, int subspace_width,
                                 std::vector<CodebookStage> stages)
    : rows_(rows), cols_(cols), d_(subspace_width), stages_(std::move(stages)) {
  if (rows <= 0 || cols <= 0 || d_ <= 0 || cols % d_ != 0)
    throw Error(
        fmt::format("codebook payload: a {}x{} matrix cannot have subspaces of width {} (expected a "
                    "divisor of the columns)",
                    rows, cols, d_));
  if (stages_.empty()) throw Error("codebook payload: no stage");
  const int64_t m = subspaces();
  for (std::size_t si = 0; si < stages_.size(); ++si) {
    CodebookStage& s = stages_[si];
    auto bad = [&](const std::string& what) {
      return Error(fmt::format("codebook payload, stage {}: {}", si, what));
    };
    if (s.clusters < 2 || s.clusters > 65536)
      throw bad(fmt::format("{} clusters (expected 2..65536)", s.clusters));
    if (int64_t(s.codes.size()) != rows * m)
      throw bad(fmt::format("{} codes for {} rows x {} subspaces", s.codes.size(), rows, m));
    for (uint16_t c : s.codes)
      if (c >= s.clusters) throw bad(fmt::format("code {} of a codebook of {} entries", c, s.clusters));
    const int64_t entries = m * s.clusters * d_;
    if (s.codebook_bits == 0) {
      if (int64_t(s.values.size()) != entries || !s.levels.empty())
        throw bad(fmt::format("fp16 codebook of {} values (expected [{}, {}, {}])", s.values.size(), m,
                              s.clusters, d_));
      for (float& v : s.values) v = roundToHalf(v);
    } else {
      if (s.codebook_bits < 2 || s.codebook_bits > 16)
        throw bad(fmt::format("codebook of {}-bit levels (expected 0 for fp16, or 2..16)", s.codebook_bits));
      if (int64_t(s.levels.size()) != entries || int64_t(s.min.size()) != m || int64_t(s.step.size()) != m)
        throw bad(fmt::format("{} levels and {}/{} min/step for a [{}, {}, {}] codebook", s.levels.size(),
                              s.min.size(), s.step.size(), m, s.clusters, d_));
      const uint32_t limit = 1u << s.codebook_bits;
      for (uint16_t l : s.levels)
        if (l >= limit) throw bad(fmt::format("level {} does not fit {} bits", l, s.codebook_bits));
      for (float& v : s.min) v = roundToHalf(v);
      for (float& v : s.step) v = roundToHalf(v);
      s.values.clear();
    }
  }
}

MatrixRM CodebookPayload::dequantize() const {
  const int64_t m = subspaces();
  MatrixRM out = MatrixRM::Zero(rows_, cols_);
  // Stages in order, each adding its vectors: float sums in stage order.
  for (const CodebookStage& s : stages_) {
    const std::vector<float> book = codebookValues(s, m, d_);
    for (int64_t r = 0; r < rows_; ++r) {
      float* row = out.data() + r * cols_;
      for (int64_t j = 0; j < m; ++j) {
        const float* v = book.data() + (j * s.clusters + s.codes[std::size_t(r * m + j)]) * d_;
        for (int t = 0; t < d_; ++t) row[j * d_ + t] += v[t];
      }
    }
  }
  // Extension point (QET's entanglement): a per-row element reorder described by indicator bits would be
  // undone here, permuting each row of `out` back to the original column order before it is returned.
  return out;
}

int64_t CodebookPayload::codeBytes(std::size_t stage) const {
  const CodebookStage& s = stages_.at(stage);
  return packedCodeBytes(rows_ * subspaces(), s.codeBits());
}

int64_t CodebookPayload::codebookBytes(std::size_t stage) const {
  const CodebookStage& s = stages_.at(stage);
  const int64_t entries = subspaces() * s.clusters * d_;
  if (s.codebook_bits == 0) return 2 * entries;
  return 4 * packedWordCount(entries, s.codebook_bits) + 2 * 2 * subspaces();
}

int64_t CodebookPayload::storedBytes() const {
  int64_t total = 0;
  for (std::size_t s = 0; s < stages_.size(); ++s) total += codeBytes(s) + codebookBytes(s);
  return total;
}

void CodebookPayload::write(PayloadWriter& writer, const std::string& key, nlohmann::json& entry) const {
  const int64_t m = subspaces();
  entry["subspace_width"] = d_;
  entry["stages"] = nlohmann::json::array();
  for (std::size_t si = 0; si < stages_.size(); ++si) {
    const CodebookStage& s = stages_[si];
    const int bits = s.codeBits();
    entry["stages"].push_back(
        {{"clusters", s.clusters}, {"code_bits", bits}, {"codebook_bits", s.codebook_bits}});
    const std::string codes_name = fmt::format("{}.codes.{}", key, si);
    if (bits == 8) {
      const std::vector<uint8_t> c(s.codes.begin(), s.codes.end());
      writer.addValues(codes_name, DType::U8, {rows_, m}, c);
    } else if (bits == 16) {
      writer.addValues(codes_name, DType::U16, {rows_, m}, s.codes);
    } else {
      const std::vector<uint32_t> c(s.codes.begin(), s.codes.end());
      const std::vector<uint32_t> words = packBits(c, bits);
      writer.addValues(codes_name, DType::U32, {int64_t(words.size())}, words);
    }
    const std::string book_name = fmt::format("{}.codebook.{}", key, si);
    if (s.codebook_bits == 0) {
      writer.addHalf(book_name, {m, s.clusters, d_}, s.values);
    } else {
      const std::vector<uint32_t> l(s.levels.begin(), s.levels.end());
      const std::vector<uint32_t> words = packBits(l, s.codebook_bits);
      writer.addValues(book_name, DType::U32, {int64_t(words.size())}, words);
      std::vector<float> scale(static_cast<std::size_t>(2 * m));
      for (int64_t j = 0; j < m; ++j) {
        scale[std::size_t(2 * j)] = s.min[std::size_t(j)];
        scale[std::size_t(2 * j + 1)] = s.step[std::size_t(j)];
      }
      writer.addHalf(fmt::format("{}.codebook_scale.{}", key, si), {m, 2}, scale);
    }
  }
}

std::shared_ptr<const MatrixPayload> readCodebookPayload(const PayloadSource& source, const std::string& key,
                                                         const nlohmann::json& entry) {
  auto field = [&](const nlohmann::json& j, const char* name) {
    if (!j.contains(name) || !j.at(name).is_number_integer())
      throw Error(fmt::format("{}: its codebook entry lacks the integer \"{}\"", source.describe(key), name));
    return j.at(name).get<int64_t>();
  };
  const int64_t rows = field(entry, "rows"), cols = field(entry, "cols");
  const int64_t d = field(entry, "subspace_width");
  if (rows <= 0 || cols <= 0 || d <= 0 || cols % d != 0)
    throw Error(
        fmt::format("{}: subspace width {} does not divide its {} columns", source.describe(key), d, cols));
  if (!entry.contains("stages") || !entry.at("stages").is_array() || entry.at("stages").empty())
    throw Error(fmt::format("{}: its codebook entry lists no \"stages\"", source.describe(key)));
  const int64_t m = cols / d;
  std::vector<CodebookStage> stages;
  for (std::size_t si = 0; si < entry.at("stages").size(); ++si) {
    const auto& js = entry.at("stages").at(si);
    CodebookStage s;
    s.clusters = int(field(js, "clusters"));
    s.codebook_bits = int(field(js, "codebook_bits"));
    const std::string codes_name = fmt::format("{}.codes.{}", key, si);
    if (s.clusters < 2 || s.clusters > 65536)
      source.fail(codes_name, fmt::format("stage of {} clusters (expected 2..65536)", s.clusters));
    const int bits = s.codeBits();
    if (field(js, "code_bits") != bits)
      source.fail(codes_name, fmt::format("manifest says {}-bit codes; {} clusters take {} bits",
                                          field(js, "code_bits"), s.clusters, bits));
    const int64_t count = rows * m;
    const DType word = codeWordType(bits);
    if (word == DType::U8) {
      const auto c = source.values<uint8_t>(codes_name, DType::U8, count);
      s.codes.assign(c.begin(), c.end());
    } else if (word == DType::U16) {
      s.codes = source.values<uint16_t>(codes_name, DType::U16, count);
    } else {
      const auto c = unpackBits(source.values<uint32_t>(codes_name, DType::U32, packedWordCount(count, bits)),
                                count, bits);
      s.codes.assign(c.begin(), c.end());
    }
    for (uint16_t c : s.codes)
      if (c >= s.clusters)
        source.fail(codes_name, fmt::format("code {} of a {}-entry codebook", c, s.clusters));
    const std::string book_name = fmt::format("{}.codebook.{}", key, si);
    const int64_t entries = m * s.clusters * d;
    if (s.codebook_bits == 0) {
      s.values = source.floats(book_name);
      if (source.dtype(book_name) != DType::F16 || int64_t(s.values.size()) != entries)
        source.fail(book_name, fmt::format("expected F16 [{}, {}, {}]", m, s.clusters, d));
    } else {
      if (s.codebook_bits < 2 || s.codebook_bits > 16)
        source.fail(book_name,
                    fmt::format("{}-bit codebook levels (expected 2..16, or 0 for fp16)", s.codebook_bits));
      const auto l = unpackBits(
          source.values<uint32_t>(book_name, DType::U32, packedWordCount(entries, s.codebook_bits)), entries,
          s.codebook_bits);
      s.levels.assign(l.begin(), l.end());
      const std::string scale_name = fmt::format("{}.codebook_scale.{}", key, si);
      const std::vector<float> scale = source.floats(scale_name);
      if (source.dtype(scale_name) != DType::F16 || int64_t(scale.size()) != 2 * m)
        source.fail(scale_name, fmt::format("expected F16 [{}, 2] (min, step per subspace)", m));
      for (int64_t j = 0; j < m; ++j) {
        s.min.push_back(scale[std::size_t(2 * j)]);
        s.step.push_back(scale[std::size_t(2 * j + 1)]);
      }
    }
    stages.push_back(std::move(s));
  }
  return std::make_shared<CodebookPayload>(rows, cols, int(d), std::move(stages));
}

}  // namespace moewb::quant

// SPDX-License-Identifier: MIT
// Tokenizer factory, SentencePiece wrapper and the helpers shared by all tokenizers.
#include "moewb/engine/tokenizer.h"

#include <fmt/format.h>
#include <sentencepiece_processor.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "moewb/error.h"
#include "moewb/npy.h"
#include "moewb/regular_file.h"

namespace moewb::engine {
namespace fs = std::filesystem;

namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) {
    auto status = processor_.Load(path);
    if (!status.ok())
      throw Error(fmt::format("{}: cannot load SentencePiece model: {}", path, status.ToString()));
    source_ = path;
  }
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    auto status = processor_.Encode(text, &ids);
    if (!status.ok())
      throw Error(fmt::format("{}: SentencePiece encoding failed: {}", source_, status.ToString()));
    return {ids.begin(), ids.end()};
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::vector<int> v(ids.begin(), ids.end());
    std::string out;
    auto status = processor_.Decode(v, &out);
    if (!status.ok())
      throw Error(fmt::format("{}: SentencePiece decoding failed: {}", source_, status.ToString()));
    return out;
  }
  int32_t vocabSize() const override { return processor_.GetPieceSize(); }
  std::string kind() const override { return "sentencepiece"; }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::loadSentencePiece(const std::string& model_file) {
  return std::make_unique<SentencePieceTokenizer>(model_file);
}

std::unique_ptr<Tokenizer> Tokenizer::forModel(const std::string& model_dir) {
  fs::path dir = fs::is_directory(model_dir) ? fs::path(model_dir) : fs::path(model_dir).parent_path();
  // SentencePiece first: some checkpoints (tiny-mixtral among them) ship an incomplete tokenizer.json
  // conversion beside the real tokenizer.model.
  if (fs::exists(dir / "tokenizer.model")) return loadSentencePiece((dir / "tokenizer.model").string());
  if (fs::exists(dir / "tokenizer.json")) return loadByteLevelBpe((dir / "tokenizer.json").string());
  throw Error(
      fmt::format("{}: no tokenizer.model (SentencePiece) or tokenizer.json, so text cannot be turned into "
                  "tokens: copy the base model's tokenizer files into this folder (on the command line, "
                  "token ids can also be given with --ids FILE)",
                  dir.string()));
}

// Evaluation and calibration texts are megabytes (wikitext-2's test split: 1.3 MB); a gigabyte is far past
// any of them, and tokenizing it alone takes minutes. Larger files are refused before they are read.
constexpr uint64_t kMaxTextBytes = uint64_t(1) << 30;

std::string readTextFile(const std::string& path) { return readRegularFile(path, kMaxTextBytes, "text file"); }

std::vector<int32_t> readTokenIdsFile(const std::string& path) {
  if (path.size() > 4 && path.substr(path.size() - 4) == ".npy") {
    auto arr = readNpy(path);
    std::vector<int32_t> ids;
    ids.reserve(arr.data.size());
    for (float v : arr.data) ids.push_back(static_cast<int32_t>(v));
    return ids;
  }
  const std::string text = readTextFile(path);
  std::vector<int32_t> ids;
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (std::isspace(static_cast<unsigned char>(c)) || c == ',' || c == '[' || c == ']') {
      ++i;
    } else {
      std::size_t j = i;
      while (j < text.size() &&
             (std::isdigit(static_cast<unsigned char>(text[j])) || (j == i && text[j] == '-')))
        ++j;
      if (j == i)
        throw Error(fmt::format("{}: unexpected character '{}' at byte {} (token ids expected)", path, c, i));
      // At most 10 digits before converting: "99999999999999999999" overflowed std::stoll (an internal error).
      const std::string digits = text.substr(i, j - i);
      const bool negative = digits[0] == '-';
      if (digits.size() == std::size_t(negative) || digits.size() - negative > 10 || negative ||
          std::stoll(digits) > INT32_MAX)
        throw Error(fmt::format("{}: token id '{}' at byte {} is out of range (0..{} expected)", path,
                                digits.substr(0, 24), i, INT32_MAX));
      const long long v = std::stoll(digits);
      ids.push_back(static_cast<int32_t>(v));
      i = j;
    }
  }
  return ids;
}

std::vector<int32_t> tokenizeForEvaluation(const Tokenizer& tokenizer, std::string_view text,
                                           std::optional<int32_t> bos) {
  std::vector<int32_t> ids;
  if (bos) ids.push_back(*bos);
  auto body = tokenizer.encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

}  // namespace moewb::engine

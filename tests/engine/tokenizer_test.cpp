// SPDX-License-Identifier: MIT
// Byte-level BPE (tokenizer.json) on a small hand-made vocabulary, token id files and the .npy reader.
#include "moewb/engine/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "moewb/error.h"
#include "moewb/npy.h"
#include "test_support.h"

namespace moewb::engine {
namespace {

// GPT-2 style: 'Ġ' (U+0120) stands for the space byte, 'Ċ' (U+010A) for newline.
std::filesystem::path writeTinyBpe(
    const std::string& pattern = R"('s|'t| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)") {
  auto dir = test::makeTempDir("bpe");
  nlohmann::json vocab = {{"h", 0},       {"e", 1},      {"l", 2},   {"o", 3},   {"Ġ", 4},
                          {"w", 5},       {"r", 6},      {"d", 7},   {"he", 8},  {"ll", 9},
                          {"hell", 10},   {"hello", 11}, {"Ġw", 12}, {"or", 13}, {"Ġwor", 14},
                          {"Ġworld", 15}, {"ld", 16},    {"Ċ", 17},  {"!", 18}};
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", {{{"id", 19}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        // Both merge spellings exist in the wild: "a b" strings and [a, b] pairs.
        {"merges", {"h e", "l l", "he ll", "hell o", "Ġ w", "o r", {"Ġw", "or"}, "l d", "Ġwor ld"}}}}};
  std::ofstream(dir / "tokenizer.json") << j.dump();
  return dir;
}

TEST(ByteLevelBpe, MergesByRankAndSplitsSpecialTokens) {
  auto dir = writeTinyBpe();
  auto tok = Tokenizer::forModel(dir.string());
  EXPECT_EQ(tok->kind(), "bpe");
  EXPECT_EQ(tok->encode("hello world"), (std::vector<int32_t>{11, 15}));
  EXPECT_EQ(tok->encode("hello world!<|endoftext|>hello\n"), (std::vector<int32_t>{11, 15, 18, 19, 11, 17}));
  EXPECT_EQ(tok->encode("hel"), (std::vector<int32_t>{8, 2}));
  const std::string text = "hello world!<|endoftext|>hello\n";
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
}

// Qwen2's pre-tokenizer (case-insensitive contractions, Unicode classes, lookahead) compiles with PCRE2.
TEST(ByteLevelBpe, QwenPreTokenizerRegex) {
  auto dir = writeTinyBpe(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  auto tok = Tokenizer::forModel(dir.string());
  EXPECT_EQ(tok->encode("hello world!\n"), (std::vector<int32_t>{11, 15, 18, 17}));
}

TEST(ByteLevelBpe, UnknownPieceIsAnErrorNamingTheFile) {
  auto dir = writeTinyBpe();
  auto tok = Tokenizer::forModel(dir.string());
  try {
    tok->encode("xyz");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
}

TEST(TokenIds, TextAndNpyFiles) {
  auto dir = test::makeTempDir("ids");
  std::ofstream(dir / "ids.txt") << "# prompt\n1, 328 2099\n[2789]\n";
  EXPECT_EQ(readTokenIdsFile((dir / "ids.txt").string()), (std::vector<int32_t>{1, 328, 2099, 2789}));
  const float values[] = {1, 5, 7};
  writeNpy((dir / "ids.npy").string(), {3}, values);
  EXPECT_EQ(readTokenIdsFile((dir / "ids.npy").string()), (std::vector<int32_t>{1, 5, 7}));
  std::ofstream(dir / "bad.txt") << "1 2 x";
  EXPECT_THROW(readTokenIdsFile((dir / "bad.txt").string()), Error);
}

TEST(Npy, RoundTripAndReferenceShapes) {
  auto dir = test::makeTempDir("npy");
  std::vector<float> v = {1.5f, -2, 3, 4, 5, 6};
  writeNpy((dir / "a.npy").string(), {2, 3}, v.data());
  auto a = readNpy((dir / "a.npy").string());
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.data, v);
  std::ofstream(dir / "bad.npy") << "not numpy";
  EXPECT_THROW(readNpy((dir / "bad.npy").string()), Error);
}

}  // namespace
}  // namespace moewb::engine

namespace moewb::engine {
namespace {

// Issue #38, item 6: the message of a checkpoint without a tokenizer is read in the GUI too, which has no
// --ids option: it must say what to do there (copy the tokenizer files), not only name a CLI flag.
TEST(TokenizerMissing, MessageSaysHowToFixItOutsideTheCommandLine) {
  const auto dir = test::makeTempDir("moewb-no-tokenizer");
  try {
    Tokenizer::forModel(dir.string());
    FAIL() << "a folder without tokenizer files opened a tokenizer";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(dir.string()), std::string::npos) << what;
    EXPECT_NE(what.find("copy the base model's tokenizer files"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace moewb::engine

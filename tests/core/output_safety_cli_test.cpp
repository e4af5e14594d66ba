// SPDX-License-Identifier: MIT
// Issue #39, item 1 (data loss): every command that writes an output refuses, before any work, to replace
// a user's file or folder, the checkpoint it reads, or to turn a file into a folder; --force replaces only
// a previous moewb export. Each test reproduces a report of the issue with the real CLI.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "synthetic_model.h"
#include "file_helpers.h"
#include "test_support.h"

namespace moewb::test {
namespace {

namespace fs = std::filesystem;

// A one-layer llama-shaped checkpoint small enough that quantizing it takes no time.
fs::path writeSmallModel(const fs::path& dir) {
  std::vector<SyntheticTensor> tensors;
  addAttention(tensors, "model.layers.0", 64);
  writeSyntheticModel(dir, {{"model_type", "llama"}, {"hidden_size", 64}, {"num_hidden_layers", 1}}, tensors);
  return dir;
}

const char* kQuick = " --method rtn --bits 4 --only 'model.layers.0.self_attn.q_proj.weight'";

TEST(OutputSafetyCli, QuantizeOutKeepsAUsersFolder) {
  const fs::path root = makeTempDir("moewb-safe");
  const fs::path model = writeSmallModel(root / "model");
  const fs::path d = root / "d";
  fs::create_directory(d);
  std::ofstream(d / "thesis.tex") << "years of work";
  for (const char* force : {"", " --force"}) {
    SCOPED_TRACE(force);
    std::string out, err;
    EXPECT_EQ(runCli("quantize " + quoted(model) + kQuick + " --out " + quoted(d) + force, &out, &err), 1)
        << err;
    EXPECT_NE(err.find(d.string()), std::string::npos) << err;
    EXPECT_EQ(slurp(d / "thesis.tex"), "years of work");
  }
}

TEST(OutputSafetyCli, QuantizeOutNeverTurnsAFileIntoAFolder) {
  const fs::path root = makeTempDir("moewb-safe");
  const fs::path model = writeSmallModel(root / "model");
  const fs::path file = root / "somefile.txt";
  std::ofstream(file) << "notes";
  std::string out, err;
  EXPECT_EQ(runCli("quantize " + quoted(model) + kQuick + " --force --out " + quoted(file), &out, &err), 1);
  EXPECT_NE(err.find("not a folder"), std::string::npos) << err;
  ASSERT_TRUE(fs::is_regular_file(file));
  EXPECT_EQ(slurp(file), "notes");
}

TEST(OutputSafetyCli, QuantizeOutNeverReplacesTheSourceCheckpoint) {
  const fs::path root = makeTempDir("moewb-safe");
  const fs::path model = writeSmallModel(root / "src");
  const std::string weights = slurp(model / "model.safetensors");
  for (const char* dequantized : {"", " --dequantized"}) {
    SCOPED_TRACE(dequantized);
    std::string out, err;
    EXPECT_EQ(runCli("quantize " + quoted(model) + kQuick + dequantized + " --force --out " + quoted(model),
                     &out, &err),
              1);
    EXPECT_NE(err.find("this run reads"), std::string::npos) << err;
    EXPECT_EQ(slurp(model / "model.safetensors"), weights);
  }
}

TEST(OutputSafetyCli, ForceReplacesAPreviousExportAndTheEstimateIsPrinted) {
  const fs::path root = makeTempDir("moewb-safe");
  const fs::path model = writeSmallModel(root / "model");
  for (const char* dequantized : {"", " --dequantized"}) {
    SCOPED_TRACE(dequantized);
    const fs::path out_dir = root / (std::string("export") + (*dequantized ? "-bf16" : ""));
    std::string out, err;
    ASSERT_EQ(
        runCli("quantize " + quoted(model) + kQuick + dequantized + " --out " + quoted(out_dir), &out, &err),
        0)
        << err;
    EXPECT_NE(err.find("free"), std::string::npos) << "the export's size estimate and free space: " << err;
    EXPECT_EQ(
        runCli("quantize " + quoted(model) + kQuick + dequantized + " --out " + quoted(out_dir), &out, &err),
        1)
        << "an existing export is replaced only with --force";
    EXPECT_NE(err.find("--force"), std::string::npos) << err;
    EXPECT_EQ(runCli("quantize " + quoted(model) + kQuick + dequantized + " --force --out " + quoted(out_dir),
                     &out, &err),
              0)
        << err;
  }
}

TEST(OutputSafetyCli, KvOutIntoAFolderSaysWhy) {
  const fs::path dir = makeTempDir("moewb-safe");
  std::string out, err;
  EXPECT_EQ(runCli("kv --prompt 'Hello' --max-tokens 4 -o " + quoted(dir), &out, &err), 1);
  EXPECT_NE(err.find("is a folder"), std::string::npos) << err;
  EXPECT_EQ(err.find("Success"), std::string::npos) << err;
}

TEST(OutputSafetyCli, KvAndEvalKeepAnExistingFileWithoutForce) {
  const fs::path dir = makeTempDir("moewb-safe");
  const fs::path kept = dir / "kept.txt";
  std::ofstream(kept) << "mine";
  std::string out, err;
  EXPECT_EQ(runCli("kv --prompt 'Hello' --max-tokens 4 -o " + quoted(kept), &out, &err), 1);
  EXPECT_NE(err.find("--force"), std::string::npos) << err;
  const fs::path text = sourceDir() / "resources/demo-text/sample.txt";
  EXPECT_EQ(runCli("eval --text " + quoted(text) + " --seq-len 16 --max-windows 1 --save-ids " + quoted(kept),
                   &out, &err),
            1);
  EXPECT_NE(err.find("--force"), std::string::npos) << err;
  EXPECT_TRUE(slurp(kept) == "mine") << "the user's file was replaced";
  ASSERT_EQ(runCli("eval --text " + quoted(text) + " --seq-len 16 --max-windows 1 --force --save-ids " +
                       quoted(kept),
                   &out, &err),
            0)
      << err;
  EXPECT_TRUE(slurp(kept).starts_with("1\n")) << "--force replaced it with the ids";
}

}  // namespace
}  // namespace moewb::test

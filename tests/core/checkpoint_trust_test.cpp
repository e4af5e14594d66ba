// SPDX-License-Identifier: MIT
// Issue #39, item 8: checkpoints come from the internet, so a file that a checkpoint folder names (a shard in
// its index, model.safetensors, config.json) is read only when it really lies inside that folder, or in the
// Hugging Face hub cache's blobs folder of the same repository. A symbolic link pointing elsewhere is refused
// with a message naming the link and its target, before anything is read from the target: no byte of it may
// reach an error message (a link to /etc/passwd used to print its first 8 bytes as a "header length").
// MOEWB_ALLOW_EXTERNAL_FILES=1 lifts the rule for a user who built such a folder on purpose.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "moewb/checkpoint.h"
#include "moewb/error.h"
#include "synthetic_model.h"
#include "test_support.h"

namespace moewb::test {
namespace {

namespace fs = std::filesystem;

// A file outside every checkpoint whose first 8 bytes must never be shown.
constexpr char kSecret[] = "TOPSECRET: the user's private notes";

fs::path secretFile() {
  const fs::path p = makeTempDir("moewb-secret") / "notes.txt";
  std::ofstream(p, std::ios::binary) << kSecret;
  return p;
}

// Neither the text nor the first 8 bytes read as a little-endian length (how the leak looked).
void expectNoSecretIn(const std::string& message) {
  EXPECT_EQ(message.find("TOPSECRET"), std::string::npos) << message;
  EXPECT_EQ(message.find("private notes"), std::string::npos) << message;
  uint64_t as_length = 0;
  std::memcpy(&as_length, kSecret, sizeof as_length);
  EXPECT_EQ(message.find(std::to_string(as_length)), std::string::npos) << message;
}

std::string openError(const fs::path& path) {
  try {
    Checkpoint::open(path.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A one-shard checkpoint whose index names `shard_name`; the shard file itself is left to the caller.
fs::path indexedCheckpoint(const std::string& shard_name) {
  const fs::path dir = makeTempDir("moewb-trust") / "model";
  fs::create_directories(dir);
  const nlohmann::json index = {{"metadata", nlohmann::json::object()},
                                {"weight_map", {{"model.embed_tokens.weight", shard_name}}}};
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  return dir;
}

// A valid one-tensor shard in `dir` (the same tensor the index above names).
fs::path validShard(const fs::path& dir, const std::string& file_name) {
  const fs::path scratch = makeTempDir("moewb-trust-shard");
  writeSyntheticModel(scratch, nlohmann::json::object(), {{"model.embed_tokens.weight", {4, 8}}});
  fs::create_directories(dir);
  fs::copy_file(scratch / "model.safetensors", dir / file_name);
  return dir / file_name;
}

struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

TEST(CheckpointTrust, AnIndexedShardLinkingOutsideTheFolderIsRefusedWithoutReadingIt) {
  const fs::path dir = indexedCheckpoint("model-00001-of-00001.safetensors");
  const fs::path target = secretFile();
  fs::create_symlink(target, dir / "model-00001-of-00001.safetensors");
  const std::string err = openError(dir);
  ASSERT_FALSE(err.empty()) << "a shard linking outside the checkpoint was opened";
  EXPECT_NE(err.find("model-00001-of-00001.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find(fs::canonical(target).string()), std::string::npos)
      << "the message names the target: " << err;
  EXPECT_NE(err.find("MOEWB_ALLOW_EXTERNAL_FILES"), std::string::npos)
      << "the message says how to allow it: " << err;
  expectNoSecretIn(err);
}

TEST(CheckpointTrust, ALinkToEtcPasswdLeaksNothing) {
  if (!fs::exists("/etc/passwd")) GTEST_SKIP() << "no /etc/passwd here";
  const fs::path dir = indexedCheckpoint("model.safetensors");
  fs::create_symlink("/etc/passwd", dir / "model.safetensors");
  const std::string err = openError(dir);
  ASSERT_FALSE(err.empty());
  EXPECT_EQ(err.find("root"), std::string::npos) << err;
  EXPECT_EQ(err.find("header length"), std::string::npos) << "the target was read: " << err;
}

TEST(CheckpointTrust, ASingleModelFileOrGlobbedShardLinkingOutsideIsRefused) {
  for (const std::string name : {"model.safetensors", "weights-a.safetensors"}) {
    const fs::path dir = makeTempDir("moewb-trust") / "model";
    fs::create_directories(dir);
    fs::create_symlink(secretFile(), dir / name);
    const std::string err = openError(dir);
    ASSERT_FALSE(err.empty()) << name;
    EXPECT_NE(err.find(name), std::string::npos) << err;
    expectNoSecretIn(err);
  }
}

TEST(CheckpointTrust, AConfigLinkingOutsideIsRefused) {
  const fs::path dir = makeTempDir("moewb-trust") / "model";
  validShard(dir, "model.safetensors");
  // Valid JSON elsewhere: today it would be read as this model's configuration without a word.
  const fs::path elsewhere = makeTempDir("moewb-secret") / "settings.json";
  std::ofstream(elsewhere) << R"({"model_type": "TOPSECRET"})";
  fs::create_symlink(elsewhere, dir / "config.json");
  const std::string err = openError(dir);
  ASSERT_FALSE(err.empty());
  EXPECT_NE(err.find("config.json"), std::string::npos) << err;
  expectNoSecretIn(err);
}

TEST(CheckpointTrust, TheEnvironmentVariableAllowsAnOutsideShard) {
  const fs::path dir = indexedCheckpoint("model.safetensors");
  const fs::path elsewhere = validShard(makeTempDir("moewb-trust-elsewhere"), "shared.safetensors");
  fs::create_symlink(elsewhere, dir / "model.safetensors");
  ScopedEnv allow("MOEWB_ALLOW_EXTERNAL_FILES", "1");
  EXPECT_EQ(Checkpoint::open(dir.string())->tensors().size(), 1u);
}

TEST(CheckpointTrust, LinksInsideTheFolderAndTheHubCacheLayoutAreFollowed) {
  // Inside: a shard kept in a subfolder and linked from the top.
  const fs::path inside = indexedCheckpoint("model.safetensors");
  validShard(inside / "store", "real.safetensors");
  fs::create_symlink("store/real.safetensors", inside / "model.safetensors");
  EXPECT_EQ(Checkpoint::open(inside.string())->tensors().size(), 1u);

  // ~/.cache/huggingface/hub/models--org--name/snapshots/REV/* -> ../../blobs/SHA, how every hub download
  // looks.
  const fs::path repo = makeTempDir("moewb-hub") / "models--org--name";
  const fs::path snapshot = repo / "snapshots" / "0123abcd";
  fs::create_directories(snapshot);
  validShard(repo / "blobs", "5f3e9a");
  std::ofstream(repo / "blobs" / "c0ffee") << R"({"model_type": "llama"})";
  fs::create_symlink("../../blobs/5f3e9a", snapshot / "model.safetensors");
  fs::create_symlink("../../blobs/c0ffee", snapshot / "config.json");
  const auto ck = Checkpoint::open(snapshot.string());
  EXPECT_EQ(ck->tensors().size(), 1u);
  EXPECT_EQ(ck->config().value("model_type", ""), "llama");
}

TEST(CheckpointTrust, TheCliRefusesAnOutsideShardWithAMessage) {
  const fs::path dir = indexedCheckpoint("model.safetensors");
  fs::create_symlink(secretFile(), dir / "model.safetensors");
  std::string out, err;
  EXPECT_EQ(runCli("inspect '" + dir.string() + "'", &out, &err), 1) << out << err;
  EXPECT_NE(err.find("outside"), std::string::npos) << err;
  expectNoSecretIn(out + err);
}

}  // namespace
}  // namespace moewb::test

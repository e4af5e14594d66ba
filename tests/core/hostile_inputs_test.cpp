// SPDX-License-Identifier: MIT
// Issue #39, items 2, 3 and 5: crafted inputs that crashed `moewb`, made it allocate without bound or block,
// or ended in an internal error. Each is now a message naming the file, tensor, key or option, found by a
// check before any allocation. The CLI runs with a bounded address space and time, so a regression fails
// the test instead of exhausting the machine.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "moewb/checkpoint.h"
#include "moewb/engine/model_config.h"
#include "moewb/error.h"
#include "moewb/safetensors.h"
#include "file_helpers.h"
#include "test_support.h"

namespace moewb::test {
namespace {

namespace fs = std::filesystem;

// The CLI with 4 GB of address space and 60 s; returns its exit code (124: timed out, 128+N: signal N).
int runBounded(const std::string& args, std::string* err) {
  const fs::path dir = makeTempDir("moewb-bounded");
  const std::string cmd = "ulimit -v 4000000; timeout 60 '" + std::string(MOEWB_CLI_PATH) + "' " + args +
                          " >/dev/null 2>" + quoted(dir / "err") + " </dev/null";
  const int status = std::system(cmd.c_str());
  *err = slurp(dir / "err");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A safetensors file of the given header text and data bytes, as a hostile or broken writer makes it.
void writeRawSafetensors(const fs::path& file, const std::string& header, std::size_t data_bytes) {
  fs::create_directories(file.parent_path());
  std::ofstream f(file, std::ios::binary);
  const uint64_t size = header.size();
  f.write(reinterpret_cast<const char*>(&size), sizeof size);  // little-endian, as the format says
  f << header << std::string(data_bytes, '\0');
}

// One BF16 tensor of `shape` (with its exact data) in model.safetensors of a fresh folder.
fs::path modelWithTensor(const std::string& name, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const uint64_t bytes = uint64_t(n) * 2;
  const nlohmann::json header = {{name, {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {0, bytes}}}}};
  const fs::path dir = makeTempDir("moewb-hostile") / "model";
  writeRawSafetensors(dir / "model.safetensors", header.dump(), bytes);
  return dir;
}

TEST(HostileInputs, SpectrumOfAMatrixWithAZeroDimensionIsAMessage) {
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{64, 0}, {0, 64}}) {
    const std::string name = "model.layers.0.mlp.down_proj.weight";
    const fs::path model = modelWithTensor(name, shape);
    std::string err;
    EXPECT_EQ(runBounded("spectrum " + quoted(model) + " --tensor " + name, &err), 1) << err;
    EXPECT_NE(err.find(name), std::string::npos) << err;
  }
}

TEST(HostileInputs, EmptyTensorsWithHugeDimensionsAreRejectedWithoutAllocating) {
  const std::string name = "model.layers.0.self_attn.q_proj.weight";
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{200000000, 0}, {3037000500, 3037000500, 0}, {int64_t(1) << 40, 0}}) {
    const fs::path model = modelWithTensor(name, shape);
    for (const char* command : {"stats", "inspect", "quantize --method rtn"}) {
      SCOPED_TRACE(command);
      std::string err;
      EXPECT_EQ(runBounded(std::string(command) + " " + quoted(model), &err), 1) << err;
      EXPECT_NE(err.find(name), std::string::npos) << err;
    }
  }
}

TEST(HostileInputs, AFifoNamedModelSafetensorsDoesNotBlock) {
  const fs::path dir = makeTempDir("moewb-hostile");
  ASSERT_EQ(::mkfifo((dir / "model.safetensors").c_str(), 0600), 0);
  std::string err;
  EXPECT_EQ(runBounded("inspect " + quoted(dir), &err), 1) << err;
  EXPECT_NE(err.find("regular file"), std::string::npos) << err;
}

TEST(HostileInputs, TextIsReadOnlyFromRegularFiles) {
  for (const char* text : {"/dev/zero", "/dev/urandom"}) {
    std::string err;
    EXPECT_EQ(runBounded(std::string("eval --seq-len 16 --text ") + text, &err), 1) << err;
    EXPECT_NE(err.find(text), std::string::npos) << err;
    const fs::path out = makeTempDir("moewb-hostile") / "kv.safetensors";
    EXPECT_EQ(runBounded("kv -o " + quoted(out) + " --ids " + text, &err), 1) << err;
    EXPECT_NE(err.find(text), std::string::npos) << err;
  }
}

TEST(HostileInputs, LayerCountIsCheckedAgainstTheTensors) {
  const fs::path model = makeTempDir("moewb-hostile") / "model";
  fs::copy(demoModelDir(), model);
  nlohmann::json config = nlohmann::json::parse(slurp(model / "config.json"));
  config["num_hidden_layers"] = 1000000000;
  std::ofstream(model / "config.json") << config.dump();
  const auto ckpt = Checkpoint::open(model.string());
  try {
    engine::parseModelConfig(*ckpt);
    FAIL() << "a billion layers accepted from a 4-layer checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_hidden_layers"), std::string::npos) << e.what();
  }
  std::string err;
  EXPECT_EQ(runBounded("eval " + quoted(model) + " --seq-len 16 --max-windows 1 --text " +
                           quoted(sourceDir() / "resources/demo-text/sample.txt"),
                       &err),
            1)
      << err;
}

// Sizes in config.json that the weights cannot have: per-layer buffers sized from them ran into bad_alloc
// (or, without a limit, the machine's memory) before any tensor was read.
TEST(HostileInputs, ConfigSizesAreCheckedAgainstTheWeights) {
  const std::vector<std::pair<std::string, std::string>> cases = {{"hidden_size", "hidden_size"},
                                                                  {"num_local_experts", "experts"},
                                                                  {"intermediate_size", "intermediate"},
                                                                  {"head_dim", "head"}};
  for (const auto& [key, named] : cases) {
    SCOPED_TRACE(key);
    const fs::path model = makeTempDir("moewb-hostile") / "model";
    fs::copy(demoModelDir(), model);
    nlohmann::json config = nlohmann::json::parse(slurp(model / "config.json"));
    config[key] = 100000000;
    std::ofstream(model / "config.json") << config.dump();
    std::string err;
    EXPECT_EQ(runBounded("eval " + quoted(model) + " --seq-len 16 --max-windows 1 --text " +
                             quoted(sourceDir() / "resources/demo-text/sample.txt"),
                         &err),
              1)
        << err;
    EXPECT_NE(err.find(named), std::string::npos) << err;
    EXPECT_NE(err.find("config.json"), std::string::npos) << err;
  }
}

TEST(HostileInputs, DuplicateKeysInAHeaderAreNamed) {
  const std::string header = R"({"a.weight":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
                             R"("a.weight":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}})";
  const fs::path file = makeTempDir("moewb-hostile") / "model.safetensors";
  writeRawSafetensors(file, header, 4);
  try {
    readSafetensorsHeader(file.string());
    FAIL() << "the second 'a.weight' silently replaced the first";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'a.weight'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("twice"), std::string::npos) << e.what();
  }
  // Inside an entry too.
  writeRawSafetensors(file, R"({"b":{"dtype":"BF16","dtype":"F32","shape":[1],"data_offsets":[0,2]}})", 2);
  EXPECT_THROW(readSafetensorsHeader(file.string()), Error);
}

}  // namespace
}  // namespace moewb::test

// SPDX-License-Identifier: MIT
// Issue #39, item 7: exports of checkpoints with tens of thousands of tensors (DeepSeek-V3 has ~90k). The
// time is guarded by `moewb bench quant` (export_header_only_90k_tensors); this checks that the linear
// bookkeeping writes the same thing the old one did: every tensor once, in order, with its bytes, split
// into shards at the size limit, each named in the index, and a name added twice still refused.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/error.h"
#include "moewb/quant/export.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/safetensors_writer.h"
#include "test_support.h"

namespace {

namespace fs = std::filesystem;
using namespace moewb::quant;

constexpr int kTensors = 6000;

std::string tensorName(int i) {
  return "model.layers." + std::to_string(i / 10) + ".extra." + std::to_string(i % 10) + ".bias";
}

fs::path manySmallTensors() {
  const fs::path dir = moewb::test::makeTempDir("moewb-many") / "model";
  fs::create_directories(dir);
  moewb::SafetensorsWriter w;
  for (int i = 0; i < kTensors; ++i)
    w.addFloat(tensorName(i), moewb::DType::F32, {2}, std::vector<float>{float(i), -float(i)});
  w.write(dir / "model.safetensors");
  std::ofstream(dir / "config.json") << R"({"model_type":"llama"})";
  return dir;
}

TEST(ExportManyTensors, EveryTensorIsCopiedOnceWithItsBytesAcrossShards) {
  const moewb::ModelCatalog catalog(moewb::Checkpoint::open(manySmallTensors().string()));
  ModelQuantization nothing;
  nothing.settings.method = "rtn";
  ExportOptions options;
  options.max_shard_bytes = 8 * 1000;  // 1000 tensors of 8 bytes a shard
  const fs::path out = moewb::test::makeTempDir("moewb-many-out") / "q";
  writeCompressedModel(catalog, nothing, out, options);

  const auto index = nlohmann::json::parse(std::ifstream(out / "model.safetensors.index.json"));
  ASSERT_EQ(index.at("weight_map").size(), std::size_t(kTensors));
  EXPECT_EQ(index.at("weight_map").at(tensorName(0)), "model-00001-of-00006.safetensors");
  EXPECT_EQ(index.at("weight_map").at(tensorName(kTensors - 1)), "model-00006-of-00006.safetensors");
  const auto reopened = moewb::Checkpoint::open(out.string());
  ASSERT_EQ(reopened->tensors().size(), std::size_t(kTensors));
  for (int i : {0, 1, 999, 1000, 4321, kTensors - 1}) {
    const auto t = reopened->find(tensorName(i));
    ASSERT_TRUE(t) << tensorName(i);
    EXPECT_EQ(reopened->readFloat(*t), (std::vector<float>{float(i), -float(i)})) << tensorName(i);
  }
}

TEST(ExportManyTensors, TheWriterStillRefusesANameAddedTwiceAndCountsItsBytes) {
  moewb::SafetensorsWriter w;
  for (int i = 0; i < 100; ++i)
    w.addFloat(tensorName(i), moewb::DType::F16, {3}, std::vector<float>{1, 2, 3});
  EXPECT_EQ(w.dataBytes(), 100u * 6u);
  EXPECT_THROW(w.addFloat(tensorName(42), moewb::DType::F16, {3}, std::vector<float>{1, 2, 3}), moewb::Error);
  EXPECT_EQ(w.size(), 100u);
  EXPECT_EQ(w.dataBytes(), 100u * 6u);
}

}  // namespace

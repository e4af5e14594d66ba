// SPDX-License-Identifier: MIT
// ROUTER.json (moewb/methods/moqae.h): a round trip keeps everything, and a bad file is an error that names
// the file and the key, never a crash or a router of the wrong shape.
#include <gtest/gtest.h>

#include <fstream>

#include "moewb/engine/kv_cache.h"
#include "moewb/error.h"
#include "moewb/methods/moqae.h"
#include "test_support.h"

namespace moewb::methods::moqae {
namespace {

RouterSet smallSet() {
  engine::ModelConfig config;
  config.layers = 4;
  config.kv_heads = 2;
  config.head_dim = 8;
  RouterSet set = makeRouterSet(parseConfigurations("fp16,int8,int4-g32,int2", "test"), config, 16, 3, false, 3);
  set.routers[1].input_scale = 0.75;
  set.training = {{"lambda", 0.3}, {"loss_curve", {1.0, 0.5}}};
  return set;
}

std::string errorOf(const std::string& path) {
  try {
    loadRouterSet(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MoqaeRouterFile, RoundTripKeepsSettingsAndWeights) {
  const auto dir = test::makeTempDir("moqae-file");
  const RouterSet set = smallSet();
  saveRouterSet(set, (dir / "r.json").string());
  const RouterSet back = loadRouterSet((dir / "r.json").string());
  ASSERT_EQ(back.configCount(), 4);
  EXPECT_EQ(back.configs[2].spec, "int4-g32");
  EXPECT_EQ(back.configs[2].format.label(), "int4:group=32");
  EXPECT_EQ(back.chunk_tokens, 16);
  EXPECT_EQ(back.share, 3);
  EXPECT_FALSE(back.freeze);
  EXPECT_EQ(back.layers, 4);
  EXPECT_EQ(back.key_dim, 8);
  ASSERT_EQ(back.routers.size(), 2u);
  EXPECT_EQ(back.routers[1].layer, 3);
  EXPECT_DOUBLE_EQ(back.routers[1].input_scale, 0.75);
  for (std::size_t g = 0; g < 2; ++g) {
    EXPECT_EQ(back.routers[g].w1, set.routers[g].w1);  // JSON numbers keep float64 exactly
    EXPECT_EQ(back.routers[g].w2, set.routers[g].w2);
    EXPECT_EQ(back.routers[g].w3, set.routers[g].w3);
  }
  EXPECT_EQ(back.training["lambda"], 0.3);
  // The spec builds a policy from the file.
  auto policy = engine::makeKvCachePolicy("moqae:" + (dir / "r.json").string());
  EXPECT_EQ(policy->chunkTokens(), 16);
  EXPECT_EQ(policy->label(), "moqae:" + (dir / "r.json").string());
}

TEST(MoqaeRouterFile, BadFilesNameTheFileAndTheKey) {
  const auto dir = test::makeTempDir("moqae-bad");
  const std::string path = (dir / "router.json").string();
  auto write = [&](const nlohmann::json& j) { std::ofstream(path) << j.dump(); };
  const nlohmann::json good = routerSetToJson(smallSet());
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string key;
  };
  const std::vector<Case> cases = {
      {[](nlohmann::json& j) { j.erase("chunk"); }, "chunk: missing"},
      {[](nlohmann::json& j) { j["chunk"] = -3; }, "chunk: expected an integer"},
      {[](nlohmann::json& j) { j["format"] = "something"; }, "format"},
      {[](nlohmann::json& j) { j["configs"] = {"fp16", "int3"}; }, "int3"},
      {[](nlohmann::json& j) { j["routers"][0]["w1"].erase(0); }, "routers[0].w1: expected 8 rows of 4 numbers"},
      {[](nlohmann::json& j) { j["routers"][1]["w3"][2][1] = "x"; }, "routers[1].w3[2][1]: expected a finite number"},
      {[](nlohmann::json& j) { j["routers"].erase(1); }, "routers: expected 2 routers"},
      {[](nlohmann::json& j) { j["routers"][1]["input_scale"] = 0; }, "routers[1].input_scale"},
      {[](nlohmann::json& j) { j["model"].erase("key_dim"); }, "key_dim: missing"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    c.edit(j);
    write(j);
    const std::string error = errorOf(path);
    EXPECT_NE(error.find(path), std::string::npos) << error;
    EXPECT_NE(error.find(c.key), std::string::npos) << "expected '" << c.key << "' in: " << error;
  }
  std::ofstream(path) << "{ not json";
  EXPECT_NE(errorOf(path).find("not valid JSON"), std::string::npos);
  EXPECT_NE(errorOf((dir / "absent.json").string()).find("absent.json"), std::string::npos);
  // `moqae` is a policy, not a format a chunk can be stored in.
  EXPECT_THROW(parseKvSpec("moqae"), Error);
  EXPECT_THROW(engine::makeKvCachePolicy("moqae"), Error);
}

}  // namespace
}  // namespace moewb::methods::moqae

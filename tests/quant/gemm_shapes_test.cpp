// SPDX-License-Identifier: MIT
// The W3A16 benchmark's shapes (`moewb bench gemm --shapes/--model`, the GUI's GPU panel): "NxK" parsing
// with errors that name the option, and a model's distinct matrix shapes, checked against shapes derived
// from the model's config.json rather than from the catalog.
#include "moewb/quant/gemm_shapes.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/error.h"
#include "moewb/quant/model_quantizer.h"
#include "test_support.h"

namespace {

using namespace moewb;
using namespace moewb::quant;

TEST(GemmShapes, ParsesNxKAsUsersWriteIt) {
  for (const char* text : {"14336x4096", " 14336 X 4096 ", "14336\xC3\x97" "4096", "14336 \xC3\x97 4096"}) {
    const GemmShape s = parseGemmShape(text, "--shapes");
    EXPECT_EQ(s.n, 14336) << text;
    EXPECT_EQ(s.k, 4096) << text;
  }
}

TEST(GemmShapes, RejectsWhatIsNotTwoPositiveIntegersNamingTheOption) {
  for (const char* text : {"", "14336", "x4096", "4096x", "0x64", "-64x64", "64x-64", "12ax64", "1e3x64", "64x64x64",
                           "64 64", "64x6 4"}) {
    try {
      parseGemmShape(text, "--shapes");
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("--shapes"), std::string::npos) << what;
      EXPECT_NE(what.find("NxK"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("'") + text + "'"), std::string::npos) << what;
    }
  }
}

TEST(GemmShapes, KernelTakesMultiplesOf64Only) {
  EXPECT_TRUE(w3a16KernelTakes({14336, 4096}));
  EXPECT_TRUE(w3a16KernelTakes({64, 64}));
  EXPECT_FALSE(w3a16KernelTakes({100, 64}));
  EXPECT_FALSE(w3a16KernelTakes({64, 96}));
  EXPECT_FALSE(w3a16KernelTakes({0, 64}));
  for (const GemmShape& s : defaultBenchGemmShapes()) EXPECT_TRUE(w3a16KernelTakes(s)) << s.n << "x" << s.k;
}

// (n, k) -> matrices, from the demo model's config (Mixtral layout: q, o hidden x hidden; k, v
// kv_heads * head_dim x hidden; experts w1, w3 intermediate x hidden and w2 hidden x intermediate).
std::map<std::pair<int64_t, int64_t>, int64_t> demoShapesFromConfig() {
  std::ifstream f(moewb::test::demoModelDir() / "config.json");
  const auto c = nlohmann::json::parse(f);
  const int64_t hidden = c.at("hidden_size"), inter = c.at("intermediate_size"), layers = c.at("num_hidden_layers");
  const int64_t heads = c.at("num_attention_heads"), kv = c.at("num_key_value_heads"), experts = c.at("num_local_experts");
  const int64_t head_dim = hidden / heads;
  std::map<std::pair<int64_t, int64_t>, int64_t> shapes;
  shapes[{heads * head_dim, hidden}] += layers;  // q
  shapes[{hidden, heads * head_dim}] += layers;  // o
  shapes[{kv * head_dim, hidden}] += 2 * layers;
  shapes[{inter, hidden}] += 2 * layers * experts;
  shapes[{hidden, inter}] += layers * experts;
  return shapes;
}

TEST(GemmShapes, ModelShapesAreTheDistinctShapesOfItsQuantizableMatrices) {
  const ModelCatalog catalog(Checkpoint::open(moewb::test::demoModelDir().string()));
  const auto shapes = modelGemmShapes(catalog);
  std::map<std::pair<int64_t, int64_t>, int64_t> got;
  for (const auto& s : shapes) {
    EXPECT_TRUE(got.emplace(std::pair{s.shape.n, s.shape.k}, s.matrices).second) << "listed twice: " << s.shape.n;
    EXPECT_FALSE(s.first_tensor.empty());
    EXPECT_TRUE(w3a16KernelTakes(s.shape)) << "the demo model's dimensions are multiples of 64";
  }
  EXPECT_EQ(got, demoShapesFromConfig());
  for (const auto& s : shapes)
    if (s.shape.n == 512 && s.shape.k == 256) {
      // w1 is the gate and w3 the up projection; 4 layers x 8 experts of each.
      EXPECT_NE(s.kinds.find("expert gate \u00D7" "32"), std::string::npos) << s.kinds;
      EXPECT_NE(s.kinds.find("expert up \u00D7" "32"), std::string::npos) << s.kinds;
      EXPECT_NE(describeModelGemmShape(s).find("512x256: 64 matrices"), std::string::npos) << describeModelGemmShape(s);
      EXPECT_NE(describeModelGemmShape(s).find(s.first_tensor), std::string::npos);
    }
}

TEST(GemmShapes, FilterSelectsMatricesAndRefusesStatistics) {
  const ModelCatalog catalog(Checkpoint::open(moewb::test::demoModelDir().string()));
  const auto experts = modelGemmShapes(catalog, TensorFilter::parse("block:expert layer:0"));
  ASSERT_EQ(experts.size(), 2u);
  int64_t total = 0;
  for (const auto& s : experts) {
    total += s.matrices;
    EXPECT_EQ(s.kinds.find("attention"), std::string::npos) << s.kinds;
    EXPECT_NE(s.first_tensor.find("layers.0."), std::string::npos) << s.first_tensor;
  }
  EXPECT_EQ(total, 24) << "8 experts x 3 matrices";
  EXPECT_TRUE(modelGemmShapes(catalog, TensorFilter::parse("name:no_such_tensor")).empty());
  try {
    modelGemmShapes(catalog, TensorFilter::parse("kurtosis>1"));
    ADD_FAILURE() << "a statistics filter was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kurtosis>1"), std::string::npos) << e.what();
  }
}

// Every zoo family: each quantizable matrix is counted under exactly one shape, and the shapes are
// distinct.
TEST(GemmShapes, EveryZooFamilyAccountsForEachQuantizableMatrix) {
  MOEWB_REQUIRE_SHARED("models/zoo");
  for (const auto& dir : std::filesystem::directory_iterator(moewb::test::sharedDir() / "models/zoo")) {
    if (!dir.is_directory()) continue;
    const ModelCatalog catalog(Checkpoint::open(dir.path().string()));
    const auto shapes = modelGemmShapes(catalog);
    EXPECT_FALSE(shapes.empty()) << dir.path();
    std::map<std::pair<int64_t, int64_t>, int64_t> expected;
    for (std::size_t i : quantizableMatrices(catalog)) ++expected[{catalog.matrices()[i].rows, catalog.matrices()[i].cols}];
    std::map<std::pair<int64_t, int64_t>, int64_t> got;
    for (const auto& s : shapes) got[{s.shape.n, s.shape.k}] += s.matrices;
    EXPECT_EQ(got, expected) << dir.path();
    EXPECT_EQ(got.size(), shapes.size()) << dir.path();
  }
}

}  // namespace

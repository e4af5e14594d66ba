// SPDX-License-Identifier: MIT
// The engine evaluates compressed variants: the quantizer's in-memory results, its compressed export
// (dequantized on load) and its dequantized bf16 export all replace exactly the matrices they quantized.
#include "moewb/engine/variants.h"

#include <gtest/gtest.h>

#include "moewb/catalog.h"
#include "moewb/engine/engine.h"
#include "moewb/engine/evaluate.h"
#include "moewb/error.h"
#include "moewb/quant/export.h"
#include "moewb/quant/model_quantizer.h"
#include "test_support.h"

namespace moewb::engine {
namespace {

struct Fixture {
  std::shared_ptr<Checkpoint> ckpt;
  std::unique_ptr<ModelCatalog> catalog;
  quant::ModelQuantization quantization;
};

// The compressed export replaces `q` with exactly the quantized matrix; the dequantized (bf16) export
// within half an ulp of bf16 (2^-8 relative).
void expectExportsHold(const WeightVariant& compressed, const WeightVariant& dequantized, const quant::QuantizedMatrix& q) {
  const MatrixRM expected = quant::dequantize(q);
  EXPECT_EQ((compressed.weights->matrix(q.source.name) - expected).cwiseAbs().maxCoeff(), 0.0f) << q.source.name;
  const MatrixRM d = dequantized.weights->matrix(q.source.name);
  EXPECT_LE(((d - expected).cwiseAbs().array() / (expected.cwiseAbs().array() + 1e-30f)).maxCoeff(), 1.0f / 256)
      << q.source.name;
}

// RTN 3-bit of the first expert's three matrices of layer 0 (fast, and enough to see the replacement).
Fixture quantizeFewMatrices() {
  Fixture f;
  f.ckpt = Checkpoint::open((test::sharedDir() / "models" / "tiny-mixtral").string());
  f.catalog = std::make_unique<ModelCatalog>(f.ckpt);
  std::vector<std::size_t> chosen;
  for (auto i : quant::quantizableMatrices(*f.catalog))
    if (f.catalog->matrices()[i].name.find("layers.0.block_sparse_moe.experts.0.") != std::string::npos)
      chosen.push_back(i);
  EXPECT_EQ(chosen.size(), 3u);
  quant::QuantizeSettings s;
  s.method = "rtn";
  s.grouped.bits = 3;
  f.quantization = quant::quantizeModel(*f.catalog, s, chosen, std::vector<int>(chosen.size(), 0));
  return f;
}

TEST(Variants, InMemoryCompressedAndDequantizedExportsReplaceTheSameMatrices) {
  MOEWB_REQUIRE_SHARED("models/tiny-mixtral");
  auto f = quantizeFewMatrices();
  auto in_memory = variantFromQuantization(f.ckpt, f.quantization, "rtn3");
  EXPECT_EQ(in_memory.replaced_matrices, 3u);

  auto dir = test::makeTempDir("variants");
  quant::writeCompressedModel(*f.catalog, f.quantization, dir / "compressed");
  auto compressed = loadReplacementCheckpoint(f.ckpt, (dir / "compressed").string());
  EXPECT_EQ(compressed.replaced_matrices, 3u);
  quant::writeDequantizedModel(*f.catalog, f.quantization, dir / "dequantized");
  auto dequantized = loadReplacementCheckpoint(f.ckpt, (dir / "dequantized").string());

  for (const auto& q : f.quantization.matrices) {
    EXPECT_EQ((in_memory.weights->matrix(q.source.name) - quant::dequantize(q)).cwiseAbs().maxCoeff(), 0.0f)
        << q.source.name;
    expectExportsHold(compressed, dequantized, q);
  }
  // Untouched tensors come from the original checkpoint.
  CheckpointWeights original(f.ckpt);
  const std::string q_proj = "model.layers.0.self_attn.q_proj.weight";
  EXPECT_EQ(compressed.weights->matrix(q_proj), original.matrix(q_proj));

  // The same evaluation runs on every variant; the quantized expert changes the logits.
  MoeEngine engine(f.ckpt);
  const std::vector<int32_t> ids = {1, 328, 2099, 2789, 333, 2407, 3897, 1344, 448, 13, 13, 311};
  const MatrixRM base = engine.logits(ids);
  engine.setWeights(in_memory.weights);
  const MatrixRM a = engine.logits(ids);
  engine.setWeights(compressed.weights);
  const MatrixRM b = engine.logits(ids);
  EXPECT_EQ(a, b);
  EXPECT_GT((a - base).cwiseAbs().maxCoeff(), 0.0f);
}

// gpt-oss and GraniteMoE keep their experts in fused 3-D tensors; the quantizers see one matrix per expert
// slice ("<tensor>[e]", WeightMatrix::name) and the engine must pick every replaced slice up, whether the
// variant is in memory, a compressed export or a dequantized (bf16, original layout) export.
class FusedExpertVariants : public ::testing::TestWithParam<std::string> {};

TEST_P(FusedExpertVariants, QuantizedSlicesReachTheEngine) {
  MOEWB_REQUIRE_SHARED("models/zoo/" + GetParam());
  auto ckpt = Checkpoint::open((test::sharedDir() / "models" / "zoo" / GetParam()).string());
  ModelCatalog catalog(ckpt);
  MoeEngine engine(ckpt);
  const std::vector<int32_t> ids = {5, 77, 310, 12, 499, 250, 3, 41, 160, 88, 402, 9, 270, 33, 150, 61};
  const MatrixRM base = engine.logits(ids);

  // Every matrix replaced by its own value (the slices read through the catalog) changes nothing.
  ReplacedWeights::Replacements same;
  int slices = 0;
  for (const WeightMatrix& m : catalog.matrices()) {
    same.emplace(m.name, std::make_shared<MatrixRM>(catalog.readMatrix(m)));
    slices += m.slice >= 0;
  }
  ASSERT_GT(slices, 0);
  engine.setWeights(std::make_shared<ReplacedWeights>(std::make_shared<CheckpointWeights>(ckpt), same));
  EXPECT_EQ((engine.logits(ids) - base).cwiseAbs().maxCoeff(), 0.0f);

  // RTN 3-bit quantizes the slices too, and the logits move a little.
  auto rtn = quantizeVariant(ckpt, "rtn:3");
  int replaced_slices = 0;
  for (const auto& [name, m] : std::static_pointer_cast<const ReplacedWeights>(rtn.weights)->replacements())
    replaced_slices += name.ends_with("]");
  EXPECT_EQ(replaced_slices, slices);
  engine.setWeights(rtn.weights);
  const MatrixRM quantized = engine.logits(ids);
  const double change = (quantized - base).cwiseAbs().maxCoeff() / base.cwiseAbs().maxCoeff();
  EXPECT_GT(change, 1e-4);
  EXPECT_LT(change, 1.0);
  std::printf("[ variant  ] %s rtn:3 changes the logits by %.3g of max|logit|\n", GetParam().c_str(), change);

  // Only the slices replaced: the experts alone moved.
  ReplacedWeights::Replacements only_slices;
  for (const auto& [name, m] : std::static_pointer_cast<const ReplacedWeights>(rtn.weights)->replacements())
    if (name.ends_with("]")) only_slices.emplace(name, m);
  engine.setWeights(
      std::make_shared<ReplacedWeights>(std::make_shared<CheckpointWeights>(ckpt), only_slices));
  EXPECT_GT((engine.logits(ids) - base).cwiseAbs().maxCoeff(), 0.0f);

  // The exports of the same quantization give the same engine inputs.
  quant::QuantizeSettings settings;
  settings.method = "rtn";
  settings.grouped.bits = 3;
  settings.grouped.group = 64;
  const auto matrices = quant::quantizableMatrices(catalog);
  const auto quantization =
      quant::quantizeModel(catalog, settings, matrices, std::vector<int>(matrices.size(), 0));
  auto dir = test::makeTempDir("fused-variants");
  quant::writeCompressedModel(catalog, quantization, dir / "compressed");
  quant::writeDequantizedModel(catalog, quantization, dir / "dequantized");
  auto compressed = loadReplacementCheckpoint(ckpt, (dir / "compressed").string());
  auto dequantized = loadReplacementCheckpoint(ckpt, (dir / "dequantized").string());
  for (const auto& q : quantization.matrices)
    if (q.source.slice >= 0) expectExportsHold(compressed, dequantized, q);
  engine.setWeights(compressed.weights);
  EXPECT_EQ(engine.logits(ids), quantized);
}

INSTANTIATE_TEST_SUITE_P(Families, FusedExpertVariants,
                         ::testing::Values("gpt_oss", "granitemoe", "llama4_text"));

TEST(Variants, MalformedSpecsAndForeignExportsAreRefused) {
  MOEWB_REQUIRE_SHARED("models/tiny-mixtral");
  auto ckpt = Checkpoint::open((test::sharedDir() / "models" / "tiny-mixtral").string());
  EXPECT_THROW(quantizeVariant(ckpt, "gptq:3"), Error);
  EXPECT_THROW(quantizeVariant(ckpt, "milo:3"), Error);
  EXPECT_THROW(quantizeVariant(ckpt, "hqq:3:uniform-8"), Error);
  EXPECT_THROW(quantizeVariant(ckpt, "milo:3:frequency-8"), Error);  // no frequencies given
  EXPECT_THROW(loadReplacementCheckpoint(ckpt, (test::sharedDir() / "models" / "zoo" / "mixtral").string()),
               Error);
}

}  // namespace
}  // namespace moewb::engine

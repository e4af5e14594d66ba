// SPDX-License-Identifier: MIT
// Compressed and dequantized exports: what is reopened equals what was in memory; cancelled runs leave
// nothing behind.
#include "moewb/quant/export.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/dtype.h"
#include "moewb/progress.h"
#include "moewb/quant/model_quantizer.h"
#include "test_support.h"

namespace {

using namespace moewb::quant;
namespace fs = std::filesystem;

std::shared_ptr<moewb::ModelCatalog> demoCatalog() {
  return std::make_shared<moewb::ModelCatalog>(moewb::Checkpoint::open(moewb::test::demoModelDir().string()));
}

// Layer 0's attention and expert 0: every kind of quantized tensor, quickly.
std::vector<std::size_t> someMatrices(const moewb::ModelCatalog& c) {
  std::vector<std::size_t> out;
  for (std::size_t i : quantizableMatrices(c)) {
    const std::string& n = c.matrices()[i].name;
    if (globMatch("model.layers.0.self_attn.*", n) || globMatch("model.layers.0.*experts.0.*", n))
      out.push_back(i);
  }
  return out;
}

ModelQuantization run(const moewb::ModelCatalog& c, const std::string& m, int bits, CompensatorFormat comp, int rank) {
  QuantizeSettings s;
  s.method = m;
  s.grouped = {bits, 64};
  s.milo.compensator = comp;
  s.milo.max_iters = 3;
  const auto mats = someMatrices(c);
  ModelQuantization q = quantizeModel(c, s, mats, std::vector<int>(mats.size(), rank));
  q.policy = m == "milo" ? fmt::format("uniform-{}", rank) : "";
  return q;
}

TEST(Export, CompressedReopensExactlyForEveryFormat) {
  const auto catalog = demoCatalog();
  struct Case {
    std::string m;
    int bits;
    CompensatorFormat comp;
    int rank;
  };
  for (const Case c :
       {Case{"milo", 3, CompensatorFormat::Int3, 8}, Case{"milo", 4, CompensatorFormat::Int8, 4},
        Case{"milo", 2, CompensatorFormat::Fp16, 4},
        Case{"rtn", 8, CompensatorFormat::Int3, 0}}) {
    const ModelQuantization q = run(*catalog, c.m, c.bits, c.comp, c.rank);
    const fs::path out = moewb::test::makeTempDir("moewb-export") / "compressed";
    writeCompressedModel(*catalog, q, out);
    ASSERT_TRUE(fs::exists(out / "manifest.json"));
    ASSERT_TRUE(fs::exists(out / "config.json"));
    const auto reopened = CompressedModel::open(out);
    EXPECT_EQ(reopened->quantizedNames().size(), q.matrices.size());
    EXPECT_EQ(reopened->manifest().at("method"), c.m);
    for (const auto& m : q.matrices) {
      const auto& entry = reopened->manifest().at("tensors").at(m.source.name);
      EXPECT_EQ(entry.at("rank").get<int>(), m.rank);
      EXPECT_EQ(entry.at("bits").get<int>(), c.bits);
      EXPECT_EQ(entry.at("bytes").get<int64_t>(), m.bytes);
      EXPECT_DOUBLE_EQ(entry.at("rel_error").get<double>(), m.rel_error);
      const QuantizedMatrix back = reopened->read(m.source.name);
      EXPECT_EQ(back.base.codes, m.base.codes);
      EXPECT_EQ(reopened->dequantize(m.source.name), dequantize(m)) << m.source.name;
    }
    // Untouched tensors are copied byte for byte.
    const auto& src = catalog->checkpoint();
    const auto i = src.find("model.embed_tokens.weight");
    const auto j = reopened->checkpoint().find("model.embed_tokens.weight");
    ASSERT_TRUE(i && j);
    const auto a = src.bytes(*i), b = reopened->checkpoint().bytes(*j);
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  }
}

TEST(Export, DequantizedReloadsEqualToInMemory) {
  const auto catalog = demoCatalog();
  const ModelQuantization q = run(*catalog, "milo", 3, CompensatorFormat::Int3, 8);
  const fs::path out = moewb::test::makeTempDir("moewb-export") / "dequantized";
  writeDequantizedModel(*catalog, q, out);
  const auto back = moewb::Checkpoint::open(out.string());
  const auto& src = catalog->checkpoint();
  ASSERT_EQ(back->tensors().size(), src.tensors().size());
  EXPECT_TRUE(fs::exists(out / "config.json"));
  EXPECT_TRUE(fs::exists(out / "model.safetensors.index.json"));
  moewb::ModelCatalog back_catalog(back);
  for (const auto& m : q.matrices) {
    const moewb::MatrixRM expected = dequantize(m);
    const auto idx = back->find(src.tensor(m.source.tensor).name);
    ASSERT_TRUE(idx);
    EXPECT_EQ(back->tensor(*idx).dtype, moewb::DType::BF16);
    EXPECT_EQ(back->tensor(*idx).shape, src.tensor(m.source.tensor).shape);
    moewb::WeightMatrix wm = m.source;
    wm.tensor = *idx;
    const moewb::MatrixRM got = back_catalog.readMatrix(wm);
    for (Eigen::Index k = 0; k < got.size(); ++k)
      ASSERT_EQ(got.data()[k], moewb::bf16ToFloat(moewb::floatToBf16(expected.data()[k])))
          << m.source.name << " " << k;
  }
  // Tensors that were not quantized keep their bytes.
  for (std::size_t t = 0; t < src.tensors().size(); ++t) {
    bool quantized = false;
    for (const auto& m : q.matrices) quantized = quantized || m.source.tensor == t;
    if (quantized) continue;
    const auto a = src.bytes(t), b = back->bytes(*back->find(src.tensor(t).name));
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << src.tensor(t).name;
  }
}

TEST(Export, CancelledRunsLeaveNothing) {
  const auto catalog = demoCatalog();
  // Cancelled while quantizing.
  QuantizeSettings s;
  s.method = "hqq";
  int calls = 0;
  EXPECT_THROW(quantizeModel(*catalog, s, someMatrices(*catalog), {},
                             [&](double, std::string_view) { return ++calls < 3; }),
               moewb::Cancelled);
  // Cancelled while writing: neither the target nor a staging folder remains.
  const ModelQuantization q = run(*catalog, "hqq", 3, CompensatorFormat::Int3, 0);
  const fs::path parent = moewb::test::makeTempDir("moewb-export-cancel");
  for (int stop_after : {1, 5}) {
    int n = 0;
    auto cancel = [&](double, std::string_view) { return ++n < stop_after; };
    EXPECT_THROW(writeCompressedModel(*catalog, q, parent / "out", {}, cancel), moewb::Cancelled);
    n = 0;
    EXPECT_THROW(writeDequantizedModel(*catalog, q, parent / "deq", cancel), moewb::Cancelled);
    EXPECT_TRUE(fs::is_empty(parent)) << "left behind: " << fs::directory_iterator(parent)->path();
  }
}

}  // namespace

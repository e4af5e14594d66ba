// SPDX-License-Identifier: MIT
// quantizeModel as the GUI and the engine use it: per-tensor callbacks, progress, determinism.
#include "moewb/quant/model_quantizer.h"

#include <gtest/gtest.h>

#include <mutex>
#include <set>

#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "test_support.h"

namespace {

using namespace moewb::quant;

TEST(ModelQuantizer, DeterministicForASeedWhateverTheThreadCount) {
  moewb::ModelCatalog catalog(moewb::Checkpoint::open(moewb::test::demoModelDir().string()));
  std::vector<std::size_t> mats;
  for (std::size_t i : quantizableMatrices(catalog))
    if (globMatch("model.layers.1.*", catalog.matrices()[i].name) && mats.size() < 6) mats.push_back(i);
  ASSERT_EQ(mats.size(), 6u);
  QuantizeSettings s;
  s.method = "milo";
  s.milo.svd.method = SvdMethod::Randomized;
  s.milo.max_iters = 3;
  s.seed = 99;
  const std::vector<int> ranks(mats.size(), 8);
  std::vector<ModelQuantization> runs;
  for (int threads : {1, 2}) {
    s.threads = threads;
    std::set<std::string> done;
    std::vector<double> fractions;
    std::mutex m;
    runs.push_back(quantizeModel(
        catalog, s, mats, ranks,
        [&](double f, std::string_view) {
          fractions.push_back(f);
          return true;
        },
        [&](const QuantizedMatrix& q) {
          std::lock_guard lock(m);
          EXPECT_TRUE(done.insert(q.source.name).second) << "reported twice: " << q.source.name;
          EXPECT_GT(q.bytes, 0);
        }));
    EXPECT_EQ(done.size(), mats.size());
    ASSERT_FALSE(fractions.empty());
    for (double f : fractions) EXPECT_TRUE(f >= 0 && f <= 1) << f;
    EXPECT_DOUBLE_EQ(fractions.back(), 1.0);
  }
  for (std::size_t i = 0; i < mats.size(); ++i) {
    const QuantizedMatrix &a = runs[0].matrices[i], &b = runs[1].matrices[i];
    EXPECT_EQ(a.source.name, catalog.matrices()[mats[i]].name) << "results keep the order asked for";
    EXPECT_EQ(a.base.codes, b.base.codes);
    EXPECT_EQ(a.u->codes, b.u->codes);
    EXPECT_EQ(a.rel_error, b.rel_error);
    EXPECT_EQ(dequantize(a), dequantize(b));
  }
  // Totals: the compressed model is the original minus what the quantized matrices saved.
  int64_t saved = 0;
  for (const auto& q : runs[0].matrices) saved += q.original_bytes - q.bytes;
  EXPECT_EQ(runs[0].compressed_bytes, runs[0].original_bytes - saved);
}

}  // namespace

namespace {

TEST(ModelQuantizer, PolicyPreviewPredictsTheQuantizedSizes) {
  moewb::ModelCatalog catalog(moewb::Checkpoint::open(moewb::test::demoModelDir().string()));
  std::vector<std::size_t> mats;
  for (std::size_t i : quantizableMatrices(catalog))
    if (globMatch("model.layers.2.*", catalog.matrices()[i].name)) mats.push_back(i);
  QuantizeSettings s;
  s.method = "milo";
  s.milo.max_iters = 1;
  const auto ranks = ranksForPolicy(catalog, mats, RankPolicy::parse("dense-32+sparse-4"));
  const PolicyPreview preview = previewPolicy(catalog, mats, ranks, s);
  const ModelQuantization q = quantizeModel(catalog, s, mats, ranks);
  ASSERT_EQ(preview.rows.size(), q.matrices.size());
  for (std::size_t i = 0; i < mats.size(); ++i) {
    EXPECT_EQ(preview.rows[i].rank, q.matrices[i].rank);
    EXPECT_EQ(preview.rows[i].base_bytes + preview.rows[i].compensator_bytes, q.matrices[i].bytes);
    EXPECT_EQ(preview.rows[i].compensator_bytes, q.matrices[i].compensator_bytes);
  }
  EXPECT_EQ(preview.compressed_bytes, q.compressed_bytes);
}

}  // namespace

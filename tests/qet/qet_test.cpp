// SPDX-License-Identifier: MIT
// QET (issue #37): the entanglement reorder and its exact inverse, Theorem 2 (one level leaves
// 1 - 1/pi of PQ's error on i.i.d. normal data), the memory accounting of the "qet" payload, its export
// and reload, and the acceptance check against FAISS PQ at equal memory on the paper's synthetic set 1.
#include "moewb/methods/qet.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numbers>
#include <random>

#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/dtype.h"
#include "moewb/error.h"
#include "moewb/methods/registry.h"
#include "moewb/quant/export.h"
#include "moewb/quant/model_quantizer.h"
#include "test_support.h"

namespace {

namespace qet = moewb::methods::qet;
using moewb::MatrixRM;

MatrixRM randomNormal(int64_t rows, int64_t cols, uint64_t seed, double mean = 0, double sigma = 1) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(mean, sigma);
  MatrixRM x(rows, cols);
  for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = float(n(rng));
  return x;
}

double mse(const MatrixRM& a, const MatrixRM& b) {
  return (a - b).cast<double>().array().square().mean();
}

// --- entanglement ---

TEST(QetEntanglement, SplitThenMergeReturnsTheMatrixBitForBit) {
  // Ties, signed zeros, infinities and NaN included: the merge must move values, never recompute them.
  MatrixRM x = randomNormal(37, 64, 1);
  x(0, 0) = x(0, 1) = 0.25f;
  x(1, 2) = 0.0f;
  x(1, 3) = -0.0f;
  x(2, 4) = std::numeric_limits<float>::infinity();
  x(2, 5) = -std::numeric_limits<float>::infinity();
  x(3, 6) = std::numeric_limits<float>::quiet_NaN();
  for (int levels = 0; levels <= 6; ++levels) {
    SCOPED_TRACE(levels);
    const qet::Entangled e = qet::entangle(x, levels);
    EXPECT_EQ(int64_t(e.bits.size()), x.rows() * qet::indicatorBitsPerRow(x.cols(), levels));
    EXPECT_EQ(qet::indicatorBitsPerRow(x.cols(), levels), levels * 32);
    const MatrixRM back = qet::disentangle(e.reordered, levels, e.bits);
    ASSERT_EQ(back.size(), x.size());
    EXPECT_EQ(std::memcmp(back.data(), x.data(), sizeof(float) * std::size_t(x.size())), 0);
  }
  EXPECT_THROW(qet::entangle(MatrixRM::Zero(2, 12), 3), moewb::Error);  // 12 is not divisible by 8
}

TEST(QetEntanglement, OneLevelPutsTheSmallerOfEachPairFirst) {
  MatrixRM x(1, 8);
  x << 3, 1, 2, 5, -1, -4, 7, 7;
  const qet::Entangled e = qet::entangle(x, 1);
  MatrixRM expected(1, 8);
  expected << 1, 2, -4, 7, 3, 5, -1, 7;
  EXPECT_EQ(e.reordered, expected);
  EXPECT_EQ(e.bits, (std::vector<uint8_t>{0, 1, 0, 0}));
  // Two levels: [S | L] each split again; level 2's bits follow level 1's, S block first.
  const qet::Entangled e2 = qet::entangle(x, 2);
  MatrixRM expected2(1, 8);
  expected2 << 1, -4, 2, 7, 3, -1, 5, 7;
  EXPECT_EQ(e2.reordered, expected2);
  EXPECT_EQ(e2.bits, (std::vector<uint8_t>{0, 1, 0, 0, /*S*/ 1, 1, /*L*/ 1, 1}));
}

// --- Theorem 2 ---

// The theorem: after one entanglement level the elements of S (and of L) of i.i.d. N(mu, s^2) data have
// variance s^2 (1 - 1/pi) ~ 0.682 s^2, so PQ, whose error scales with the variance of what it quantizes,
// errs 0.682 times as much on the reordered matrix as on the raw one at the same cluster count. Checked
// with one centroid per subspace (the centroid is the mean: the statement exactly) on 200,000 rows, and
// with 16 and 256 clusters on 8-wide subspaces (k-means proper) on 32,768 rows.
MatrixRM pqReconstruction(const MatrixRM& m, int clusters) {
  const auto book = qet::trainSubspaceCentroids(m, 8, clusters, 10, 3);
  const auto codes = qet::assignSubspaceCodes(m, 8, clusters, book);
  return qet::reconstructSubspaces(m.rows(), m.cols(), 8, clusters, book, codes);
}

TEST(QetTheorem2, OneLevelGivesOneMinusOneOverPiOfPqError) {
  const qet::FaissThreads threads(1);  // spinning OpenMP threads crawl on a loaded machine
  const double expected = 1.0 - 1.0 / std::numbers::pi;
  for (int clusters : {1, 16, 256}) {
    SCOPED_TRACE(clusters);
    const MatrixRM x = randomNormal(clusters == 1 ? 200000 : 32768, 16, 7 + uint64_t(clusters), 0.5, 2.0);
    const qet::Entangled e = qet::entangle(x, 1);
    const double ratio =
        mse(e.reordered, pqReconstruction(e.reordered, clusters)) / mse(x, pqReconstruction(x, clusters));
    RecordProperty("mse_ratio_k" + std::to_string(clusters), std::to_string(ratio));
    std::printf("one entanglement level, k = %d: QET/PQ MSE = %.4f (1 - 1/pi = %.4f)\n", clusters, ratio,
                expected);
    EXPECT_NEAR(ratio, expected, 0.01);
  }
}

// --- memory accounting ---

// Collects what a payload writes.
class ByteCounter final : public moewb::quant::PayloadWriter {
 public:
  std::map<std::string, int64_t> bytes;
  void addTensor(const std::string& name, moewb::DType, std::vector<int64_t>,
                 std::span<const std::byte> data) override {
    bytes[name] += int64_t(data.size());
  }
  void addHalf(const std::string& name, std::vector<int64_t>, std::span<const float> values) override {
    bytes[name] += 2 * int64_t(values.size());
  }
  std::string sharedTensor(const void*, const std::string& hint, const SharedWriteFn&) override {
    return hint;
  }
  int64_t total() const {
    int64_t t = 0;
    for (const auto& [n, b] : bytes) t += b;
    return t;
  }
};

TEST(QetMemory, StoredBytesAreThePackedPartsAndMeetTheRatioWithinOnePercent) {
  const MatrixRM x = qet::syntheticSet(1, 1);
  const qet::FaissThreads threads(1);  // spinning OpenMP threads crawl on a loaded machine
  for (double ratio : {2.0, 4.0, 8.0}) {
    SCOPED_TRACE(ratio);
    qet::Config c;
    c.ratio = ratio;
    c.kmeans_iters = 8;
    const qet::Plan plan = qet::plan(x.rows(), x.cols(), c);
    ASSERT_EQ(plan.stages.size(), 2u);
    EXPECT_EQ(plan.stages[0].levels, 3);
    EXPECT_EQ(plan.stages[1].levels, 0);
    const auto payload = qet::quantize(x, c, 1);
    // Stored bytes == the sum of the packed parts == what the plan counted == what is written.
    int64_t parts = 0;
    for (std::size_t s = 0; s < payload->stages().size(); ++s) {
      const auto& st = payload->stages()[s];
      EXPECT_EQ(st.codebook->stages().front().clusters, plan.stages[s].clusters);
      EXPECT_EQ(payload->indicatorBytes(s), plan.stages[s].indicator_bytes);
      EXPECT_EQ(st.codebook->codeBytes(0), plan.stages[s].code_bytes);
      EXPECT_EQ(st.codebook->codebookBytes(0), plan.stages[s].codebook_bytes);
      parts += payload->indicatorBytes(s) + st.codebook->codeBytes(0) + st.codebook->codebookBytes(0);
    }
    // Indicator maps: 3 levels of 64 bits per 128-wide row.
    EXPECT_EQ(payload->indicatorBytes(0), 1024 * 3 * 64 / 8);
    EXPECT_EQ(payload->storedBytes(), parts);
    EXPECT_EQ(payload->storedBytes(), plan.totalBytes());
    ByteCounter written;
    nlohmann::json entry;
    payload->write(written, "m", entry);
    EXPECT_EQ(written.total(), payload->storedBytes());
    EXPECT_TRUE(written.bytes.count("m.stage0.indicators"));
    EXPECT_FALSE(written.bytes.count("m.stage1.indicators"));  // the residual stage is not reordered
    const double achieved = double(plan.original_bytes) / double(payload->storedBytes());
    EXPECT_EQ(plan.original_bytes, 1024 * 128 * 4);
    EXPECT_LE(payload->storedBytes(), plan.budget_bytes);
    EXPECT_NEAR(achieved / ratio, 1.0, 0.01);
  }
}

TEST(QetMemory, ABudgetThatCannotHoldTheIndicatorMapsIsRefused) {
  qet::Config c;
  c.ratio = 24;  // 1.33 bits per element, less than the 1.5 bits of three levels of indicators
  EXPECT_THROW(qet::plan(1024, 128, c), moewb::Error);
}

// --- acceptance on the paper's synthetic set 1 ---

TEST(QetAcceptance, AtRatioFourOnSyntheticSetOneQetErrsAtMostFifteenPercentOfFaissPq) {
  // Issue #37's acceptance: QET MSE <= 15% of FAISS PQ's at equal memory (the paper: 6.94%), every
  // stored part counted, elements counted as 32-bit. Measured here: 0.085 (docs/qet.md).
  const MatrixRM x = qet::syntheticSet(1, 1);
  const qet::FaissThreads threads(1);  // spinning OpenMP threads crawl on a loaded machine
  qet::Config c;
  c.ratio = 4;
  const qet::Reconstruction q = qet::qetReconstruction("qet", x, c, 1);
  const qet::Plan plan = qet::plan(x.rows(), x.cols(), c);
  const qet::Reconstruction pq = qet::pqAtBudget(x, plan.budget_bytes, 8, 32, c.kmeans_iters, 1);
  ASSERT_FALSE(q.skipped) << q.note;
  ASSERT_FALSE(pq.skipped) << pq.note;
  EXPECT_LE(q.bytes, plan.budget_bytes);
  EXPECT_LE(pq.bytes, plan.budget_bytes);
  const double ratio = mse(x, q.w) / mse(x, pq.w);
  RecordProperty("qet_over_pq_mse", std::to_string(ratio));
  std::printf("set 1, ratio 4: QET %s (%lld bytes), PQ %s (%lld bytes): MSE ratio %.4f\n", q.note.c_str(),
              static_cast<long long>(q.bytes), pq.note.c_str(), static_cast<long long>(pq.bytes), ratio);
  EXPECT_LE(ratio, 0.15);
}

// --- the registry method, export and reload ---

TEST(QetMethod, ExportsAndReloadsThroughTheRegistry) {
  const auto catalog =
      std::make_shared<moewb::ModelCatalog>(moewb::Checkpoint::open(moewb::test::demoModelDir().string()));
  const moewb::methods::WeightMethod& method = moewb::methods::weightMethod("qet");
  EXPECT_EQ(method.payloadKind(), moewb::methods::PayloadKind::Codebook);
  moewb::quant::QuantizeSettings s = method.defaults();
  moewb::methods::setOption(*method.option("ratio"), s, "4", "test");
  moewb::methods::setOption(*method.option("kmeans-iters"), s, "5", "test");
  std::vector<std::size_t> picked;
  for (std::size_t i : moewb::quant::quantizableMatrices(*catalog))
    if (catalog->matrices()[i].name.starts_with("model.layers.0.self_attn.") && picked.size() < 2)
      picked.push_back(i);
  ASSERT_EQ(picked.size(), 2u);
  const auto q = moewb::quant::quantizeModel(*catalog, s, picked, std::vector<int>(picked.size(), 0));
  const auto dir = moewb::test::makeTempDir("moewb-qet-export") / "compressed";
  moewb::quant::writeCompressedModel(*catalog, q, dir);
  const auto model = moewb::quant::CompressedModel::open(dir);
  for (const auto& m : q.matrices) {
    SCOPED_TRACE(m.source.name);
    ASSERT_TRUE(m.payload);
    EXPECT_EQ(m.payload->kind(), "qet");
    const auto& e = model->manifest().at("tensors").at(m.source.name);
    EXPECT_EQ(e.at("payload"), "qet");
    EXPECT_EQ(e.at("bytes").get<int64_t>(), m.payload->storedBytes());
    // Counted at 16 bits per original weight by default (the bf16 checkpoint): ratio 4 within 1%.
    EXPECT_NEAR(double(m.source.rows * m.source.cols * 2) / double(m.bytes) / 4.0, 1.0, 0.01);
    int64_t held = 0;
    for (const auto& t : model->checkpoint().tensors())
      if (t.name.starts_with(m.source.name + ".")) held += int64_t(t.nbytes);
    EXPECT_EQ(held, m.payload->storedBytes());
    const auto back = model->read(m.source.name);
    EXPECT_EQ(moewb::quant::dequantize(back), moewb::quant::dequantize(m));
    EXPECT_LT(m.rel_error, 0.5);
  }
}

}  // namespace

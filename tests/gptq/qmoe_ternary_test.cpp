// SPDX-License-Identifier: MIT
// qmoe-ternary: GPTQ onto QMoE's per-row ternary grid, stored as a dictionary payload. Its codes are
// ternary with the row's two levels stored exactly, GPTQ beats nearest rounding on the output error,
// its code statistics are reported, a matrix without calibration is rounded and says so, and the
// fallback notes and measures of a calibrated run over the demo model survive export and re-import.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <random>

#include "moewb/catalog.h"
#include "moewb/engine/calibration.h"
#include "moewb/methods/options.h"
#include "moewb/methods/registry.h"
#include "moewb/quant/export.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/quant/payloads/ternary_dictionary.h"
#include "test_support.h"

namespace {

using moewb::MatrixRM;
using moewb::quant::MatrixHessian;
using moewb::quant::QuantizedMatrix;
using moewb::quant::QuantizeSettings;

MatrixRM randomWeights(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.02f);
  MatrixRM w(rows, cols);
  for (int64_t i = 0; i < w.size(); ++i) w.data()[i] = n(rng);
  return w;
}

// A few directions carry most of the inputs' energy, as in a layer's activations.
Eigen::MatrixXd correlatedInputs(int64_t tokens, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  const int64_t k = cols / 8;
  Eigen::MatrixXd z(tokens, k), b(k, cols), noise(tokens, cols);
  for (int64_t i = 0; i < z.size(); ++i) z.data()[i] = n(rng);
  for (int64_t i = 0; i < b.size(); ++i) b.data()[i] = n(rng);
  for (int64_t i = 0; i < noise.size(); ++i) noise.data()[i] = n(rng);
  return z * b / std::sqrt(double(k)) + 0.3 * noise;
}

QuantizeSettings ternary(const char* rounding) {
  const auto& m = moewb::methods::weightMethod("qmoe-ternary");
  QuantizeSettings s = m.defaults();
  moewb::methods::setOption(*m.option("rounding"), s, rounding, "rounding");
  return s;
}

double outputError(const MatrixRM& w, const MatrixRM& approx, const Eigen::MatrixXd& x) {
  return ((w - approx).cast<double>() * x.transpose()).norm() / (w.cast<double>() * x.transpose()).norm();
}

TEST(QmoeTernary, GptqCodesAreTernaryWithExactRowLevelsAndBeatNearestRounding) {
  const int64_t rows = 48, cols = 203;  // odd: the last pair of a row is padded
  const MatrixRM w = randomWeights(rows, cols, 21);
  const Eigen::MatrixXd x = correlatedInputs(900, cols, 22);
  MatrixHessian h;
  h.cols = cols;
  h.tokens = h.tokens_seen = x.rows();
  h.h = 2.0 * x.transpose() * x;
  const QuantizedMatrix g = moewb::quant::quantizeMatrix(w, ternary("gptq"), 0, 0, 1, {}, &h);
  const QuantizedMatrix nearest = moewb::quant::quantizeMatrix(w, ternary("nearest"), 0, 0, 1, {}, &h);
  ASSERT_TRUE(g.payload);
  EXPECT_EQ(g.payload->kind(), "dictionary");
  EXPECT_TRUE(g.fallback.empty()) << g.fallback;
  EXPECT_TRUE(nearest.fallback.empty());
  const auto& p = dynamic_cast<const moewb::quant::TernaryDictionaryPayload&>(*g.payload);
  const MatrixRM approx = p.dequantize();
  int64_t zeros = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<int8_t> codes = p.decodeTernaryCodes(r);
    ASSERT_EQ(int64_t(codes.size()), cols);
    EXPECT_LE(p.lo()[std::size_t(r)], 0.0f);
    EXPECT_GE(p.hi()[std::size_t(r)], 0.0f);
    for (int64_t j = 0; j < cols; ++j) {
      const int8_t c = codes[std::size_t(j)];
      zeros += c == 0;
      const float expected = c < 0 ? p.lo()[std::size_t(r)] : (c > 0 ? p.hi()[std::size_t(r)] : 0.0f);
      ASSERT_EQ(approx(r, j), expected) << r << ", " << j;
    }
  }
  const double e_gptq = outputError(w, approx, x),
               e_nearest = outputError(w, moewb::quant::dequantize(nearest), x);
  EXPECT_LT(e_gptq, 0.85 * e_nearest) << "GPTQ " << e_gptq << " vs nearest " << e_nearest;
  EXPECT_NEAR(g.measures.at("zero_fraction"), double(zeros) / double(rows * cols), 1e-12);
  EXPECT_GT(g.measures.at("code_entropy_bits"), 0.0);
  EXPECT_LE(g.measures.at("code_entropy_bits"), std::log2(3.0) + 1e-12);
  // Pairs can only reveal dependence between neighbours: at most the codes' own entropy (up to the
  // padding weight of odd rows).
  EXPECT_LE(g.measures.at("pair_entropy_bits"),
            g.measures.at("code_entropy_bits") * (1.0 + 1.0 / cols) + 1e-9);
  // 1.6 bits per weight: a u16 per 5 pairs (here 102 pairs: 20 words + a 2-pair tail), offsets, levels.
  EXPECT_EQ(g.bytes, rows * 21 * 2 + 4 * (rows + 1) + 4 * rows);
  EXPECT_EQ(g.bytes,
            moewb::methods::weightMethod("qmoe-ternary").predictedSize(ternary("gptq"), rows, cols, 0).base);
}

TEST(QmoeTernary, AMatrixWithoutCalibrationIsRoundedToNearestAndSaysSo) {
  const MatrixRM w = randomWeights(8, 64, 23);
  const QuantizedMatrix g = moewb::quant::quantizeMatrix(w, ternary("gptq"), 0, 0, 1, {}, nullptr);
  const QuantizedMatrix nearest = moewb::quant::quantizeMatrix(w, ternary("nearest"), 0, 0, 1, {}, nullptr);
  EXPECT_EQ(g.fallback, "nearest ternary rounding: no calibration token reached this matrix");
  EXPECT_EQ(moewb::quant::dequantize(g), moewb::quant::dequantize(nearest));
}

TEST(QmoeTernary, FallbacksAndMeasuresOfACalibratedRunSurviveExportAndImport) {
  // Layer 0 of the demo model, calibrated on 12 tokens (top-2 of 8 experts): some experts get none.
  const moewb::ModelCatalog catalog(moewb::Checkpoint::open(moewb::test::demoModelDir().string()));
  std::vector<std::size_t> mats;
  std::vector<std::string> names;
  for (std::size_t i : moewb::quant::quantizableMatrices(catalog))
    if (catalog.matrices()[i].name.rfind("model.layers.0.", 0) == 0) {
      mats.push_back(i);
      names.push_back(catalog.matrices()[i].name);
    }
  const auto engine = moewb::engine::MoeEngine::open(moewb::test::demoModelDir().string());
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(1 + (i * 37 + 11) % 4000);
  moewb::engine::CalibrationOptions o;
  o.seq_len = 12;
  const moewb::quant::CalibrationSet set = moewb::engine::collectHessians(*engine, ids, names, o);
  moewb::quant::PipelineOptions options;
  options.calibration = &set;
  for (const char* method : {"qmoe-ternary", "gptq"}) {
    SCOPED_TRACE(method);
    const QuantizeSettings s = moewb::methods::weightMethod(method).defaults();
    const auto result = moewb::quant::quantizeModel(catalog, s, mats, {}, {}, {}, {}, options);
    int fallbacks = 0;
    for (const auto& q : result.matrices) {
      const bool calibrated = set.count(q.source.name) > 0;
      EXPECT_EQ(q.fallback.empty(), calibrated) << q.source.name << ": " << q.fallback;
      fallbacks += !calibrated;
    }
    ASSERT_GT(fallbacks, 0) << "12 tokens should leave some expert of 8 without a token";
    const auto dir = moewb::test::makeTempDir("gptq-export");
    moewb::quant::writeCompressedModel(catalog, result, dir / "out");
    const auto model = moewb::quant::CompressedModel::open(dir / "out");
    for (const auto& q : result.matrices) {
      const QuantizedMatrix back = model->read(q.source.name);
      EXPECT_EQ(back.fallback, q.fallback);
      EXPECT_EQ(back.measures, q.measures);
      EXPECT_EQ(moewb::quant::dequantize(back), moewb::quant::dequantize(q)) << q.source.name;
    }
  }
}

}  // namespace

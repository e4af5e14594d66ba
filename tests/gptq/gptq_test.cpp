// SPDX-License-Identifier: MIT
// GPTQ (method gptq) on synthetic matrices: it beats RTN on the layer's output error, reduces to RTN
// exactly when no error can cross columns (identity or diagonal Hessian), handles dead inputs and
// rank-deficient Hessians by damping, falls back to RTN (and says so) when the Cholesky fails at every
// damping or the matrix has no Hessian, and act-order stores codes in the original column order.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "moewb/methods/options.h"
#include "moewb/methods/registry.h"
#include "moewb/quant/grouped_quant.h"
#include "moewb/quant/model_quantizer.h"

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

// Inputs with strongly correlated features of different scales, as a layer's activations are: a few
// directions carry most of the energy (X = Z_k B + noise), feature scales differ.
Eigen::MatrixXd randomInputs(int64_t tokens, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  const int64_t k = std::max<int64_t>(4, cols / 8);
  Eigen::MatrixXd z(tokens, k), b(k, cols), noise(tokens, cols);
  for (int64_t i = 0; i < z.size(); ++i) z.data()[i] = n(rng);
  for (int64_t i = 0; i < b.size(); ++i) b.data()[i] = n(rng);
  for (int64_t i = 0; i < noise.size(); ++i) noise.data()[i] = n(rng);
  Eigen::VectorXd scale(cols);
  for (int64_t j = 0; j < cols; ++j) scale[j] = 0.2 + 2.0 * double((j * 7919) % cols) / double(cols);
  return (z * b / std::sqrt(double(k)) + 0.3 * noise) * scale.asDiagonal();
}

MatrixHessian hessianOf(const Eigen::MatrixXd& x) {
  MatrixHessian h;
  h.cols = x.cols();
  h.tokens = h.tokens_seen = x.rows();
  h.h = 2.0 * x.transpose() * x;
  return h;
}

MatrixHessian hessianFrom(Eigen::MatrixXd m) {
  MatrixHessian h;
  h.cols = m.cols();
  h.tokens = h.tokens_seen = 1;
  h.h = std::move(m);
  return h;
}

QuantizeSettings settingsFor(const std::string& method,
                             std::initializer_list<std::pair<const char*, const char*>> opts) {
  const auto& m = moewb::methods::weightMethod(method);
  QuantizeSettings s = m.defaults();
  for (const auto& [k, v] : opts) moewb::methods::setOption(*m.option(k), s, v, k);
  m.validate(s);
  return s;
}

QuantizedMatrix run(const MatrixRM& w, const QuantizeSettings& s, const MatrixHessian* h) {
  return moewb::quant::quantizeMatrix(w, s, 0, 0, 1, {}, h);
}

// ||(W - W^) X^T||_F / ||W X^T||_F
double outputError(const MatrixRM& w, const MatrixRM& approx, const Eigen::MatrixXd& x) {
  const Eigen::MatrixXd e = (w - approx).cast<double>() * x.transpose();
  return e.norm() / (w.cast<double>() * x.transpose()).norm();
}

void expectSameCodes(const moewb::quant::GroupedQuantized& a, const moewb::quant::GroupedQuantized& b) {
  ASSERT_EQ(a.rows, b.rows);
  ASSERT_EQ(a.cols, b.cols);
  EXPECT_EQ(a.bits, b.bits);
  EXPECT_EQ(a.groupsPerRow(), b.groupsPerRow());
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.scales, b.scales);
  EXPECT_EQ(a.zeros, b.zeros);
}

TEST(Gptq, LowersTheOutputErrorWellBelowRtnsOnCorrelatedInputs) {
  const MatrixRM w = randomWeights(96, 256, 1);
  const Eigen::MatrixXd x = randomInputs(1024, 256, 2);
  const MatrixHessian h = hessianOf(x);
  for (const char* bits : {"2", "3", "4"}) {
    const QuantizedMatrix rtn = run(w, settingsFor("rtn", {{"bits", bits}, {"group", "64"}}), nullptr);
    const QuantizedMatrix g = run(w, settingsFor("gptq", {{"bits", bits}, {"group", "64"}}), &h);
    const double e_rtn = outputError(w, moewb::quant::dequantize(rtn), x);
    const double e_gptq = outputError(w, moewb::quant::dequantize(g), x);
    EXPECT_LT(e_gptq, 0.8 * e_rtn) << bits << " bits: GPTQ " << e_gptq << " vs RTN " << e_rtn;
    EXPECT_TRUE(g.fallback.empty()) << g.fallback;
    // The method's own measure is the same quantity (H = 2 X^T X: the factor 2 cancels).
    EXPECT_NEAR(g.measures.at("output_rel_error"), e_gptq, 1e-4 * e_gptq + 1e-6);
    // Output error is what GPTQ trades weight error for.
    EXPECT_GT(g.rel_error, 0.9 * rtn.rel_error);
  }
}

TEST(Gptq, IdentityOrDiagonalHessianGivesRtnsCodesExactly) {
  // With a diagonal H the factor of H^-1 is diagonal: no column's error reaches another, so GPTQ rounds
  // every weight as it is, on RTN's own grid (groups of updated weights are the original weights).
  const MatrixRM w = randomWeights(40, 192, 3);
  Eigen::VectorXd d(192);
  for (int64_t j = 0; j < 192; ++j) d[j] = 0.5 + double(j % 13);
  const MatrixHessian identity = hessianFrom(Eigen::MatrixXd::Identity(192, 192));
  const MatrixHessian diagonal = hessianFrom(d.asDiagonal().toDenseMatrix());
  for (const char* bits : {"2", "3", "4", "8"})
    for (const char* group : {"64", "48", "0"})
      for (const char* act : {"off", "on"}) {
        SCOPED_TRACE(std::string(bits) + " bits, group " + group + ", act-order " + act);
        const int grp = std::string(group) == "0" ? 192 : std::stoi(group);
        const moewb::quant::GroupedQuantized rtn = moewb::quant::quantizeRtn(w, {std::stoi(bits), grp});
        const QuantizeSettings s =
            settingsFor("gptq", {{"bits", bits}, {"group", group}, {"act-order", act}});
        expectSameCodes(run(w, s, &identity).base, rtn);
        expectSameCodes(run(w, s, &diagonal).base, rtn);
      }
}

TEST(Gptq, DeadInputsAndRankDeficientHessiansAreSolvedByDamping) {
  // 48 tokens for 128 inputs (rank 48), and inputs 5 and 77 zero on every token.
  const MatrixRM w = randomWeights(32, 128, 4);
  Eigen::MatrixXd x = randomInputs(48, 128, 5);
  x.col(5).setZero();
  x.col(77).setZero();
  const MatrixHessian h = hessianOf(x);
  const QuantizedMatrix g = run(w, settingsFor("gptq", {{"bits", "3"}, {"group", "32"}}), &h);
  EXPECT_TRUE(g.fallback.empty()) << g.fallback;
  EXPECT_EQ(g.measures.at("dead_columns"), 2.0);
  EXPECT_DOUBLE_EQ(g.measures.at("damp"), 0.01);
  const MatrixRM approx = moewb::quant::dequantize(g);
  ASSERT_TRUE(approx.allFinite());
  // A dead input's weights are set to zero before rounding: what is stored is zero's nearest level.
  for (int64_t r = 0; r < w.rows(); ++r) {
    const float step = g.base.scales[std::size_t(r * g.base.groupsPerRow() + 5 / 32)];
    EXPECT_LE(std::abs(approx(r, 5)), 0.5f * step + 1e-7f);
  }
  const QuantizedMatrix rtn = run(w, settingsFor("rtn", {{"bits", "3"}, {"group", "32"}}), nullptr);
  EXPECT_LT(outputError(w, approx, x), outputError(w, moewb::quant::dequantize(rtn), x));
}

TEST(Gptq, ACholeskyThatNeedsMoreDampingIsRetriedWithTenTimesIt) {
  // H = I - 1.05 v v^T has eigenvalue -0.05: damping 0.01 fails, 0.1 succeeds.
  const int64_t n = 64;
  Eigen::VectorXd v = Eigen::VectorXd::Ones(n) / std::sqrt(double(n));
  const MatrixHessian h = hessianFrom(Eigen::MatrixXd::Identity(n, n) - 1.05 * v * v.transpose());
  const MatrixRM w = randomWeights(16, n, 6);
  const QuantizedMatrix g = run(w, settingsFor("gptq", {{"bits", "4"}}), &h);
  EXPECT_TRUE(g.fallback.empty()) << g.fallback;
  EXPECT_NEAR(g.measures.at("damp"), 0.1, 1e-12);
}

TEST(Gptq, AHessianNoDampingRescuesOrWithoutValuesFallsBackToRtnAndSaysSo) {
  const int64_t n = 64;
  const MatrixRM w = randomWeights(16, n, 7);
  Eigen::VectorXd v = Eigen::VectorXd::Ones(n) / std::sqrt(double(n));
  const MatrixHessian indefinite = hessianFrom(Eigen::MatrixXd::Identity(n, n) - 3.0 * v * v.transpose());
  Eigen::MatrixXd bad = Eigen::MatrixXd::Identity(n, n);
  bad(3, 4) = bad(4, 3) = std::nan("");
  const MatrixHessian not_finite = hessianFrom(bad);
  const QuantizeSettings s = settingsFor("gptq", {{"bits", "3"}, {"group", "32"}});
  const moewb::quant::GroupedQuantized rtn = moewb::quant::quantizeRtn(w, {3, 32});
  const QuantizedMatrix a = run(w, s, &indefinite);
  expectSameCodes(a.base, rtn);
  EXPECT_EQ(a.fallback, "rtn: Cholesky of the damped Hessian failed up to damping 1");
  const QuantizedMatrix b = run(w, s, &not_finite);
  expectSameCodes(b.base, rtn);
  EXPECT_EQ(b.fallback, "rtn: the Hessian holds non-finite values");
}

TEST(Gptq, AMatrixWithoutCalibrationGetsRtnWithTheNote) {
  const MatrixRM w = randomWeights(24, 96, 8);
  const QuantizedMatrix g = run(w, settingsFor("gptq", {{"bits", "2"}, {"group", "0"}}), nullptr);
  expectSameCodes(g.base, moewb::quant::quantizeRtn(w, {2, 96}));
  EXPECT_EQ(g.fallback, "rtn: no calibration token reached this matrix");
  EXPECT_EQ(g.method, "gptq");
  EXPECT_EQ(g.bytes, moewb::quant::storedBytes(g.base));
}

TEST(Gptq, ActOrderStoresCodesInTheOriginalColumnOrder) {
  // Per-row ranges do not depend on the column order, so act-order on (W, H) must be plain GPTQ on the
  // permuted problem (W P, P^T H P), read back through P: the same codes, column for column.
  const int64_t rows = 24, cols = 160;
  const MatrixRM w = randomWeights(rows, cols, 9);
  const Eigen::MatrixXd x = randomInputs(400, cols, 10);
  const MatrixHessian h = hessianOf(x);
  std::vector<int64_t> order(static_cast<std::size_t>(cols));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return h.h(a, a) > h.h(b, b); });
  ASSERT_NE(order[0], 0);
  MatrixRM wp(rows, cols);
  Eigen::MatrixXd hp(cols, cols);
  for (int64_t a = 0; a < cols; ++a) {
    wp.col(a) = w.col(order[std::size_t(a)]);
    for (int64_t b = 0; b < cols; ++b) hp(a, b) = h.h(order[std::size_t(a)], order[std::size_t(b)]);
  }
  const MatrixHessian permuted = hessianFrom(hp);
  const QuantizedMatrix act =
      run(w, settingsFor("gptq", {{"bits", "3"}, {"group", "0"}, {"act-order", "on"}}), &h);
  const QuantizedMatrix plain = run(wp, settingsFor("gptq", {{"bits", "3"}, {"group", "0"}}), &permuted);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t a = 0; a < cols; ++a)
      ASSERT_EQ(act.base.codes[std::size_t(r * cols + order[std::size_t(a)])],
                plain.base.codes[std::size_t(r * cols + a)])
          << "row " << r << ", column " << order[std::size_t(a)];
  EXPECT_EQ(act.base.scales, plain.base.scales);
  // And grouped act-order (groups fixed from the original weights) still beats RTN on the output.
  const QuantizedMatrix grouped =
      run(w, settingsFor("gptq", {{"bits", "3"}, {"group", "32"}, {"act-order", "on"}}), &h);
  const QuantizedMatrix rtn = run(w, settingsFor("rtn", {{"bits", "3"}, {"group", "32"}}), nullptr);
  EXPECT_LT(outputError(w, moewb::quant::dequantize(grouped), x),
            0.85 * outputError(w, moewb::quant::dequantize(rtn), x));
}

TEST(Gptq, GroupsThatDoNotDivideTheBlockSeeEveryEarlierUpdate) {
  // Group 48 straddles the 128-column blocks; GPTQ cuts blocks at such groups so a group's range is
  // chosen from fully updated weights: every code stays in range and the result still beats RTN.
  const MatrixRM w = randomWeights(32, 300, 11);
  const Eigen::MatrixXd x = randomInputs(800, 300, 12);
  const MatrixHessian h = hessianOf(x);
  const QuantizedMatrix g = run(w, settingsFor("gptq", {{"bits", "2"}, {"group", "48"}}), &h);
  EXPECT_EQ(g.base.group, 48);
  EXPECT_EQ(g.base.groupsPerRow(), 7);
  const QuantizedMatrix rtn = run(w, settingsFor("rtn", {{"bits", "2"}, {"group", "48"}}), nullptr);
  EXPECT_LT(outputError(w, moewb::quant::dequantize(g), x),
            0.8 * outputError(w, moewb::quant::dequantize(rtn), x));
}

}  // namespace

namespace {

TEST(Gptq, TheBlockedCholeskyFormMatchesTheOneColumnAtATimeDefinition) {
  // The definition (OBQ's update in GPTQ's fixed order): round column j, spread its error over the later
  // columns with the inverse Hessian's row j, then eliminate j from the inverse; in float64. The solver's
  // blocks, lazy updates and Cholesky factor must give the same codes (a float32 near-tie may differ).
  const int64_t rows = 64, cols = 200;
  const MatrixRM w = randomWeights(rows, cols, 13);
  const Eigen::MatrixXd x = randomInputs(600, cols, 14);
  const MatrixHessian h = hessianOf(x);
  const moewb::quant::GroupedQuantized grid = moewb::quant::quantizeRtn(w, {4, int(cols)});
  Eigen::MatrixXd damped = h.h;
  damped.diagonal().array() += 0.01 * h.h.diagonal().mean();
  Eigen::MatrixXd hinv = damped.inverse();
  Eigen::MatrixXd wd = w.cast<double>();
  std::vector<uint8_t> codes(std::size_t(rows * cols));
  for (int64_t j = 0; j < cols; ++j) {
    Eigen::VectorXd err(rows);
    for (int64_t r = 0; r < rows; ++r) {
      const double step = grid.scales[std::size_t(r)], zero = grid.zeros[std::size_t(r)];
      const double c = std::clamp(std::nearbyint(wd(r, j) / step + zero), 0.0, 15.0);
      codes[std::size_t(r * cols + j)] = uint8_t(c);
      err[r] = (wd(r, j) - (c - zero) * step) / hinv(j, j);
    }
    wd.rightCols(cols - j - 1) -= err * hinv.row(j).tail(cols - j - 1);
    hinv -= hinv.col(j) * hinv.row(j) / hinv(j, j);
  }
  const QuantizedMatrix g = run(w, settingsFor("gptq", {{"bits", "4"}, {"group", "0"}}), &h);
  int64_t same = 0;
  for (std::size_t i = 0; i < codes.size(); ++i) same += codes[i] == g.base.codes[i];
  EXPECT_GE(double(same) / double(codes.size()), 0.995) << same << " of " << codes.size();
}

}  // namespace

// SPDX-License-Identifier: MIT
// A method added by one file (sign_method.cpp) reaches every place that lists methods: the CLI's help,
// `moewb quantize --method`, quick specs, export and re-loading through `moewb eval --quantized`.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/quant/export.h"
#include "test_support.h"

namespace {

namespace fs = std::filesystem;
using moewb::test::runCli;

const std::string kText = (moewb::test::sourceDir() / "resources/demo-text/sample.txt").string();

TEST(SignMethod, AppearsInQuantizeHelpWithItsOption) {
  std::string out, err;
  ASSERT_EQ(runCli("quantize --help", &out, &err), 0) << err;
  EXPECT_NE(out.find("sign: toy 1-bit method"), std::string::npos) << out;
  EXPECT_NE(out.find("--scale"), std::string::npos) << out;
  EXPECT_NE(out.find("mean-abs or max-abs"), std::string::npos) << out;
}

TEST(SignMethod, QuantizesExportsAndReloadsThroughEval) {
  const fs::path out = moewb::test::makeTempDir("moewb-sign") / "export";
  std::string o, e;
  ASSERT_EQ(runCli("quantize --method sign --scale max-abs --only 'model.layers.0.*' --json --out '" +
                       out.string() + "'",
                   &o, &e),
            0)
      << e;
  const auto report = nlohmann::json::parse(o);
  EXPECT_EQ(report.at("method"), "sign");
  EXPECT_EQ(report.at("settings").at("options").at("scale"), "max-abs");
  EXPECT_EQ(report.at("tensors").size(), 28u);

  // What was exported is sign(w) * max|w of the row|, checked against the source weights here.
  const auto model = moewb::quant::CompressedModel::open(out);
  EXPECT_EQ(model->manifest().at("method"), "sign");
  const std::string name = "model.layers.0.self_attn.q_proj.weight";
  const moewb::quant::QuantizedMatrix q = model->read(name);
  EXPECT_EQ(q.method, "sign");
  EXPECT_EQ(q.base.bits, 1);
  const moewb::ModelCatalog catalog(moewb::Checkpoint::open(moewb::test::demoModelDir().string()));
  const moewb::WeightMatrix* m = nullptr;
  for (const auto& candidate : catalog.matrices())
    if (candidate.name == name) m = &candidate;
  ASSERT_NE(m, nullptr);
  const moewb::MatrixRM w = catalog.readMatrix(*m);
  const moewb::MatrixRM d = model->dequantize(name);
  for (int64_t r = 0; r < w.rows(); r += 37) {
    const float row_max = w.row(r).cwiseAbs().maxCoeff();
    for (int64_t c = 0; c < w.cols(); c += 11) {
      EXPECT_NEAR(std::abs(d(r, c)), row_max, 1e-3 * row_max);  // the fp16 scale
      EXPECT_EQ(d(r, c) >= 0, w(r, c) >= 0);
    }
  }

  ASSERT_EQ(runCli("eval --quantized '" + out.string() + "' --text '" + kText + "' --max-windows 1 --json", &o, &e),
            0)
      << e;
  const auto eval = nlohmann::json::parse(o);
  const auto& variant = eval.at("variants").at(1);
  EXPECT_EQ(variant.at("variant"), "export");
  EXPECT_EQ(variant.at("replaced_matrices"), 28);
  // One bit per weight on layer 0 costs perplexity but stays a finite, worse number.
  EXPECT_TRUE(std::isfinite(variant.at("ppl").get<double>()));
  EXPECT_GT(variant.at("ppl").get<double>(), eval.at("variants").at(0).at("ppl").get<double>());
}

TEST(SignMethod, RunsAsAQuickSpec) {
  std::string o, e;
  ASSERT_EQ(runCli("eval --quantize sign:max-abs --no-original --text '" + kText + "' --max-windows 1 --json", &o, &e),
            0)
      << e;
  EXPECT_EQ(nlohmann::json::parse(o).at("variant"), "sign:max-abs");
  EXPECT_EQ(runCli("eval --quantize sign:median --text '" + kText + "' --max-windows 1", &o, &e), 1);
  EXPECT_NE(e.find("scale 'median' is not mean-abs or max-abs"), std::string::npos) << e;
}

TEST(SignMethod, AnotherMethodsOptionIsRefused) {
  std::string o, e;
  EXPECT_EQ(runCli("quantize --method sign --bits 3", &o, &e), 1);
  EXPECT_NE(e.find("--bits is not an option of method sign"), std::string::npos) << e;
  EXPECT_EQ(runCli("quantize --method rtn --calib '" + kText + "'", &o, &e), 1);
  EXPECT_NE(e.find("method rtn is calibration-free; --calib does not apply"), std::string::npos) << e;
  EXPECT_NE(runCli("quantize --method nope", &o, &e), 0);
  EXPECT_NE(e.find("sign"), std::string::npos) << "the known methods are listed: " << e;
}

}  // namespace

// SPDX-License-Identifier: MIT
// `moewb quantize` and `moewb spectrum` as a user runs them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "moewb/quant/rank_policy.h"
#include "test_support.h"

namespace {

namespace fs = std::filesystem;
using moewb::test::runCli;

TEST(QuantCli, QuantizeMiloJsonReportAndExport) {
  const fs::path out = moewb::test::makeTempDir("moewb-cli-q") / "export";
  std::string stdout_text, stderr_text;
  const int rc = runCli(
      "quantize --method milo --bits 3 --group 64 --policy 'uniform-8;*.q_proj.weight=16' "
      "--max-iters 3 --only 'model.layers.0.*' --json --out '" +
          out.string() + "' --device cuda",
      &stdout_text, &stderr_text);
  ASSERT_EQ(rc, 0) << stderr_text;
  const auto j = nlohmann::json::parse(stdout_text);
  if (j.at("device") == "cpu")
    EXPECT_NE(stderr_text.find("no CUDA device: quantizing on the CPU"), std::string::npos)
        << "the cuda fallback is announced: " << stderr_text;
  EXPECT_EQ(j.at("policy"), "uniform-8;*.q_proj.weight=16");
  EXPECT_EQ(j.at("tensors").size(), 28u);  // 4 attention + 8 experts x 3
  EXPECT_EQ(j.at("tensors").at("model.layers.0.self_attn.q_proj.weight").at("rank"), 16);
  EXPECT_EQ(j.at("tensors").at("model.layers.0.self_attn.k_proj.weight").at("rank"), 8);
  EXPECT_LT(j.at("compressed_bytes").get<int64_t>(), j.at("original_bytes").get<int64_t>());
  EXPECT_TRUE(fs::exists(out / "manifest.json"));
}

TEST(QuantCli, BudgetPicksAPolicyThatFits) {
  std::string o, e;
  ASSERT_EQ(
      runCli("quantize --method milo --budget 32MB --max-iters 1 --only 'model.layers.1.self_attn.*' --json",
             &o, &e),
      0)
      << e;
  const auto j = nlohmann::json::parse(o);
  EXPECT_LE(j.at("compressed_bytes").get<int64_t>(), 32'000'000);
  EXPECT_NE(j.at("policy").get<std::string>().find("dense-"), std::string::npos);
}

TEST(QuantCli, UserErrorsAreNamed) {
  std::string o, e;
  EXPECT_EQ(runCli("quantize --method milo --policy 'wide-8'", &o, &e), 1);
  EXPECT_NE(e.find("unknown kind 'wide'"), std::string::npos) << e;
  EXPECT_EQ(runCli("spectrum --tensor no.such.weight", &o, &e), 1);
  EXPECT_NE(e.find("no.such.weight"), std::string::npos) << e;
  EXPECT_EQ(runCli("quantize --method hqq --dequantized", &o, &e), 1);
  EXPECT_NE(e.find("--out"), std::string::npos) << e;
}

TEST(QuantCli, SpectrumJson) {
  std::string o, e;
  ASSERT_EQ(runCli("spectrum --tensor model.layers.0.self_attn.q_proj.weight --tau 0.5 --milo-rank 8 --json",
                   &o, &e),
            0)
      << e;
  const auto j = nlohmann::json::parse(o);
  const auto sigma = j.at("singular_values").get<std::vector<double>>();
  ASSERT_EQ(sigma.size(), 256u);
  EXPECT_TRUE(std::is_sorted(sigma.rbegin(), sigma.rend()));
  int count = 0;
  for (double s : sigma) count += s >= 0.5 * sigma.front();
  EXPECT_EQ(j.at("rank_at_tau").get<int>(), count);
  EXPECT_NEAR(j.at("cumulative_energy").back().get<double>(), 1.0, 1e-9);
  EXPECT_FALSE(j.at("milo_curve").empty());
  // Error versus rank falls as the rank grows.
  const auto& evr = j.at("error_vs_rank");
  for (std::size_t i = 1; i < evr.size(); ++i) EXPECT_LT(evr[i].at("rel_error"), evr[i - 1].at("rel_error"));
}

}  // namespace

// Regression: `moewb freq --csv` writes layer,expert,count,fraction and the frequency-R policies must
// read that file back (the loader once accepted three columns only).
TEST(QuantCli, FrequencyCsvFromFreqCommandFeedsFrequencyPolicy) {
  const auto dir = moewb::test::makeTempDir("moewb-freq-csv");
  std::string csv;
  ASSERT_EQ(runCli("freq --text " MOEWB_SOURCE_DIR "/resources/demo-text/sample.txt --seq-len 64 --max-windows 2 --csv",
                   &csv),
            0);
  std::ofstream(dir / "freq.csv") << csv;
  const auto f = moewb::quant::ExpertFrequencies::load(dir / "freq.csv");
  ASSERT_FALSE(f.counts.empty());
  double total = 0;
  for (const auto& [layer, counts] : f.counts)
    for (double c : counts) total += c;
  EXPECT_GT(total, 0.0);
}

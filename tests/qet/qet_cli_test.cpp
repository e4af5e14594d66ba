// SPDX-License-Identifier: MIT
// `moewb qet`: one JSON row per method and ratio, OPQ skipped where its rotation does not fit, and the
// reconstruction written with --write-reconstruction is the one whose error the table reports.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "moewb/checkpoint.h"
#include "moewb/methods/qet.h"
#include "test_support.h"

namespace {

TEST(QetCli, JsonRowsAndTheWrittenReconstructionAgree) {
  const auto dir = moewb::test::makeTempDir("moewb-qet-cli");
  const std::string file = (dir / "rec.safetensors").string();
  std::string out, err;
  ASSERT_EQ(moewb::test::runCli(
                "qet --synthetic 1 --seed 3 --ratio 4,8 --methods qet,pq,opq --kmeans-iters 5 --json "
                "--write-reconstruction '" +
                    file + "'",
                &out, &err),
            0)
      << err;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("original_bits"), 32);
  EXPECT_EQ(j.at("original_bytes"), 1024 * 128 * 4);
  const auto& rows = j.at("rows");
  ASSERT_EQ(rows.size(), 6u);
  double qet_mse = 0;
  for (const auto& r : rows) {
    SCOPED_TRACE(r.dump());
    const double ratio = r.at("ratio").get<double>();
    if (r.at("method") == "opq" && ratio == 8.0) {
      // The 128x128 float rotation alone is the whole budget at ratio 8.
      EXPECT_TRUE(r.at("skipped").get<bool>());
      continue;
    }
    ASSERT_FALSE(r.at("skipped").get<bool>());
    EXPECT_LE(r.at("bytes").get<int64_t>(), int64_t(1024 * 128 * 4 / ratio));
    EXPECT_GT(r.at("mse").get<double>(), 0);
    if (r.at("method") == "qet" && ratio == 4.0) qet_mse = r.at("mse").get<double>();
  }
  // The written matrix is QET's reconstruction: its error against the same synthetic set is the table's.
  const auto ckpt = moewb::Checkpoint::open(file);
  const auto index = ckpt->find("qet.ratio.4");
  ASSERT_TRUE(index);
  const std::vector<float> rec = ckpt->readFloat(*index);
  const moewb::MatrixRM x = moewb::methods::qet::syntheticSet(1, 3);
  ASSERT_EQ(int64_t(rec.size()), x.size());
  double sum = 0;
  for (int64_t i = 0; i < x.size(); ++i)
    sum += std::pow(double(x.data()[i]) - double(rec[std::size_t(i)]), 2);
  EXPECT_NEAR(sum / double(x.size()), qet_mse, 1e-9 * qet_mse);
  EXPECT_TRUE(ckpt->find("qet.ratio.8"));
}

}  // namespace

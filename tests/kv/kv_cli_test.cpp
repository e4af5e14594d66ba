// SPDX-License-Identifier: MIT
// `moewb eval --kv`: one row per format with its KV cache's bits and bytes; a typo fails before any run.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace moewb {
namespace {

std::string demoEval(const std::string& extra) {
  return "eval '" + test::demoModelDir().string() + "' --text '" +
         (test::sourceDir() / "resources/demo-text/sample.txt").string() + "' --seq-len 64 --max-windows 2 " + extra;
}

TEST(KvCli, EvalReportsBitsAndBytesPerFormat) {
  std::string out, err;
  ASSERT_EQ(test::runCli(demoEval("--kv int4-g32 --kv kivi-2 --kv-context 4096 --json"), &out, &err), 0) << err;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["variants"].size(), 3u);
  const auto& int4 = j["variants"][1];
  EXPECT_EQ(int4["variant"], "kv int4-g32");
  EXPECT_EQ(int4["kv_format"], "int4:group=32");
  // 4 layers x 2 KV heads x 64 channels, K and V; keys 4 + 1 bits, values 4 + 1 bits (group 32).
  EXPECT_DOUBLE_EQ(int4["kv_avg_bits"].get<double>(), 5.0);
  EXPECT_EQ(int4["kv_bytes"].get<uint64_t>(), uint64_t(64 * 1024 * 5 / 8));
  EXPECT_EQ(int4["kv_context"].get<int64_t>(), 4096);
  EXPECT_EQ(int4["kv_bytes_at_context"].get<uint64_t>(), uint64_t(4096 * 1024 * 5 / 8));
  EXPECT_EQ(int4["kv_fp16_bytes_at_context"].get<uint64_t>(), uint64_t(4096 * 1024 * 2));
  // kivi-2 on 64 tokens: chunk 0 at 3 bits, chunk 1 in the residual window (fp16).
  EXPECT_DOUBLE_EQ(j["variants"][2]["kv_avg_bits"].get<double>(), (3.0 + 16.0) / 2);
  EXPECT_FALSE(j["variants"][0].contains("kv_avg_bits"));
}

TEST(KvCli, UnknownFormatNamesTheKnownOnes) {
  std::string out, err;
  EXPECT_NE(test::runCli(demoEval("--kv int3"), &out, &err), 0);
  EXPECT_NE(err.find("fp16, int8, int4, int2, kivi-2, kivi-4"), std::string::npos) << err;
  EXPECT_EQ(out.find("original"), std::string::npos) << "nothing should have been evaluated";
}

}  // namespace
}  // namespace moewb

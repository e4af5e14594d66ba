// SPDX-License-Identifier: MIT
// `moewb bench`: group selection and errors (listing only: benchmarks are measured, never timed in tests).
#include <gtest/gtest.h>

#include "test_support.h"

namespace moewb {
namespace {

TEST(StatsBenchCli, GroupSelectsBenchmarksByPrefix) {
  std::string out, err;
  ASSERT_EQ(test::runCli("bench stats --list", &out, &err), 0) << err;
  EXPECT_NE(out.find("stats_bf16_row_major"), std::string::npos) << out;
  EXPECT_NE(out.find("stats_bf16_mapped_safetensors"), std::string::npos) << out;
  std::size_t lines = 0;
  for (std::size_t pos = 0; (pos = out.find('\n', pos)) != std::string::npos; ++pos) ++lines;
  std::size_t stats_lines = 0;
  for (std::size_t pos = 0; (pos = out.find("stats_", pos)) != std::string::npos; ++pos) ++stats_lines;
  EXPECT_EQ(lines, stats_lines) << "only the stats group is listed:\n" << out;

  ASSERT_EQ(test::runCli("bench stats --filter transposed --list", &out, &err), 0) << err;
  EXPECT_NE(out.find("stats_bf16_transposed"), std::string::npos);
  EXPECT_EQ(out.find("stats_bf16_row_major"), std::string::npos) << out;
}

// `--device cuda` keeps the GPU benchmarks of a group (listed in every build: without CUDA they are one
// skipping entry each).
TEST(StatsBenchCli, DeviceCudaListsOnlyTheGpuBenchmarks) {
  std::string out, err;
  ASSERT_EQ(test::runCli("bench engine --device cuda --list", &out, &err), 0) << err;
  EXPECT_NE(out.find("engine_eval_tiny_mixtral_cuda"), std::string::npos) << out;
  EXPECT_EQ(out.find("engine_eval_tiny_mixtral/"), std::string::npos) << "a CPU benchmark is listed:\n" << out;
  EXPECT_EQ(out.find("engine_freq_tiny_mixtral"), std::string::npos) << out;
  EXPECT_NE(test::runCli("bench engine --device tpu --list", &out, &err), 0) << "an unknown device is refused";
}

TEST(StatsBenchCli, UnknownGroupIsAnErrorNamingTheGroups) {
  std::string out, err;
  EXPECT_EQ(test::runCli("bench wobble", &out, &err), 1);
  EXPECT_NE(err.find("wobble"), std::string::npos) << err;
  EXPECT_NE(err.find("stats, quant, engine, open"), std::string::npos) << err;
}

}  // namespace
}  // namespace moewb

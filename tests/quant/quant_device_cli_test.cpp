// SPDX-License-Identifier: MIT
// `moewb quantize --device` and `moewb bench gemm|quantize` as a user runs them, on a machine with or
// without a GPU: the device that ran is reported, a missing GPU is said once and the CPU runs, the GPU
// benchmarks refuse clearly, and the synthetic end-to-end benchmark runs the pipeline on the CPU.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace {

using moewb::test::runCli;

TEST(QuantDeviceCli, CudaRunsOnTheGpuOrSaysOnceThatTheCpuDoes) {
  std::string out, err;
  ASSERT_EQ(
      runCli("quantize --method hqq --only 'model.layers.0.self_attn.*' --device cuda --json", &out, &err), 0)
      << err;
  const auto j = nlohmann::json::parse(out);
  const std::string device = j.at("device");
  if (device == "cpu") {
    const std::string line = "moewb quantize: no CUDA device: quantizing on the CPU (";
    ASSERT_NE(err.find(line), std::string::npos) << err;
    EXPECT_EQ(err.find(line), err.rfind(line)) << "said once";
    EXPECT_EQ(j.at("device_matrices"), 0);
  } else {
    EXPECT_EQ(device.rfind("cuda", 0), 0u) << device;
    EXPECT_EQ(j.at("device_matrices"), 4);
    EXPECT_GT(j.at("timings").at("device_total").get<double>(), 0.0);
  }
  EXPECT_EQ(j.at("tensors").size(), 4u);
  EXPECT_GT(j.at("seconds").get<double>(), 0.0);
}

TEST(QuantDeviceCli, CpuIsTheDefaultAndAutoIsQuietWithoutAGpu) {
  std::string out, err;
  ASSERT_EQ(
      runCli("quantize --method rtn --only 'model.layers.0.self_attn.q_proj.weight' --json", &out, &err), 0)
      << err;
  EXPECT_EQ(nlohmann::json::parse(out).at("device"), "cpu");
  ASSERT_EQ(
      runCli("quantize --method rtn --only 'model.layers.0.self_attn.q_proj.weight' --device auto --json",
             &out, &err),
      0)
      << err;
  EXPECT_EQ(err.find("no CUDA device"), std::string::npos) << "auto falls back silently: " << err;
  // RTN has no GPU implementation: on a GPU machine it is reported as a CPU fallback.
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("device"), "cpu");
  if (!j.at("cpu_fallbacks").empty())
    EXPECT_NE(j.at("cpu_fallbacks")[0].get<std::string>().find("RTN"), std::string::npos);
  EXPECT_NE(runCli("quantize --device tpu", &out, &err), 0);
  EXPECT_NE(err.find("--device"), std::string::npos) << err;
}

TEST(QuantDeviceCli, GpuBenchmarksSayWhatTheyNeed) {
  std::string out, err;
  for (const char* args : {"bench gemm --m 1 --shapes 256x256", "bench-gpu gemm --m 1 --shapes 256x256"}) {
    const int rc = runCli(args, &out, &err);
    if (rc == 0) GTEST_SKIP() << "a GPU is present: the benchmarks ran";
    EXPECT_EQ(rc, 1) << args;
    EXPECT_TRUE(err.find("needs a CUDA GPU") != std::string::npos ||
                err.find("built without CUDA") != std::string::npos)
        << args << ": " << err;
  }
}

TEST(QuantDeviceCli, BenchQuantStaysTheCpuGroup) {
  std::string out, err;
  ASSERT_EQ(runCli("bench quant --list", &out, &err), 0) << err;
  EXPECT_NE(out.find("quant_"), std::string::npos) << out;
  EXPECT_EQ(out.find("stats_"), std::string::npos) << out;
}

TEST(QuantDeviceCli, SyntheticPipelineBenchmarkRunsOnTheCpu) {
  std::string out, err;
  ASSERT_EQ(runCli("bench quantize --synthetic tiny-mixtral --layers 1 --device cpu --iterations 1 "
                   "--policy dense-16+kurtosis-4 --json",
                   &out, &err),
            0)
      << err;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("model"), "synthetic tiny-mixtral");
  EXPECT_EQ(j.at("matrices"), 28);
  EXPECT_EQ(j.at("device"), "cpu");
  EXPECT_EQ(j.at("policy"), "dense-16+kurtosis-4");
  EXPECT_EQ(j.at("attention").at("matrices"), 4);
  EXPECT_EQ(j.at("experts").at("matrices"), 24);
  EXPECT_LT(j.at("experts").at("min_rank").get<int>(), j.at("experts").at("max_rank").get<int>());
  const double err_mean = j.at("mean_rel_error");
  EXPECT_GT(err_mean, 0.0);
  EXPECT_LT(err_mean, 0.3);
  for (const char* stage : {"rank_policy", "generation", "upload", "quantize", "download", "store",
                            "device_total", "pipeline", "total"})
    EXPECT_TRUE(j.at("seconds").contains(stage)) << stage;
  EXPECT_FALSE(j.contains("within_5_minutes_of_gpu_time"))
      << "only the full Mixtral run is the acceptance run";
  EXPECT_NE(runCli("bench quantize --synthetic gpt-5 --device cpu", &out, &err), 0);
  EXPECT_NE(err.find("mixtral-8x7b"), std::string::npos) << "the known models are listed: " << err;
}

}  // namespace

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

// `bench gemm --model ... --list-shapes` needs no GPU: it says which shapes would be timed, what they are
// and whether the kernels take them.
TEST(QuantDeviceCli, GemmBenchListsAModelsShapes) {
  std::string out, err;
  ASSERT_EQ(runCli("bench gemm --model --list-shapes --json", &out, &err), 0) << err;
  const auto demo = nlohmann::json::parse(out).at("shapes");
  ASSERT_EQ(demo.size(), 4u) << out;  // q/o, k/v, expert gate/up, expert down
  int64_t matrices = 0;
  for (const auto& s : demo) {
    matrices += s.at("matrices").get<int64_t>();
    EXPECT_TRUE(s.at("runnable").get<bool>()) << s;
    EXPECT_FALSE(s.at("first_tensor").get<std::string>().empty()) << s;
  }
  EXPECT_EQ(matrices, 4 * (4 + 8 * 3)) << "4 layers of 4 attention and 8 x 3 expert matrices";

  ASSERT_EQ(runCli("bench gemm --model --filter 'proj:down' --shapes 4096x14336 --list-shapes", &out, &err), 0) << err;
  EXPECT_NE(out.find("| 4096x14336 |"), std::string::npos) << out;
  EXPECT_NE(out.find("| 256x512 | 32 | expert down"), std::string::npos) << out;
  EXPECT_EQ(out.find("512x256"), std::string::npos) << "--filter left out the gate and up projections: " << out;

  ASSERT_EQ(runCli("bench gemm --list-shapes", &out, &err), 0) << err;
  EXPECT_NE(out.find("| 14336x4096 |"), std::string::npos) << "the defaults are listed: " << out;

  EXPECT_NE(runCli("bench gemm --shapes 4096x14336,12ax64 --list-shapes", &out, &err), 0);
  EXPECT_NE(err.find("--shapes: expected NxK"), std::string::npos) << err;
  EXPECT_NE(err.find("'12ax64'"), std::string::npos) << err;
  EXPECT_NE(runCli("bench gemm --filter block:expert --list-shapes", &out, &err), 0);
  EXPECT_NE(err.find("needs --model"), std::string::npos) << err;
  EXPECT_NE(runCli("bench gemm --model --filter 'kurtosis>2' --list-shapes", &out, &err), 0);
  EXPECT_NE(err.find("kurtosis>2"), std::string::npos) << err;
  EXPECT_NE(runCli("bench gemm --model --filter 'name:nothing_like_this' --list-shapes", &out, &err), 0);
  EXPECT_NE(err.find("no matrix"), std::string::npos) << err;
  EXPECT_NE(runCli("bench gemm --model /nonexistent/model --list-shapes", &out, &err), 0);
  EXPECT_NE(err.find("/nonexistent/model"), std::string::npos) << err;
}

// The zoo's tiny Mixtral has 96-wide experts: listed, and marked as shapes the kernels cannot run.
TEST(QuantDeviceCli, GemmBenchMarksShapesTheKernelsCannotRun) {
  MOEWB_REQUIRE_SHARED("models/zoo/mixtral");
  std::string out, err;
  const std::string model = (moewb::test::sharedDir() / "models/zoo/mixtral").string();
  ASSERT_EQ(runCli("bench gemm --model " + model + " --list-shapes --json", &out, &err), 0) << err;
  int runnable = 0, not_runnable = 0;
  const auto shapes = nlohmann::json::parse(out).at("shapes");
  for (const auto& s : shapes) {
    const bool multiple_of_64 = s.at("n").get<int64_t>() % 64 == 0 && s.at("k").get<int64_t>() % 64 == 0;
    EXPECT_EQ(s.at("runnable").get<bool>(), multiple_of_64) << s;
    (multiple_of_64 ? runnable : not_runnable) += 1;
    if (!multiple_of_64) EXPECT_NE(s.at("why_not").get<std::string>().find("multiples of 64"), std::string::npos);
  }
  EXPECT_GT(runnable, 0) << out;
  EXPECT_GT(not_runnable, 0) << out;
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

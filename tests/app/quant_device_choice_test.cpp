// SPDX-License-Identifier: MIT
// The quantization device choice is made in one place (moewb_app_support) for `moewb quantize --device`
// and the GUI: cpu is the CPU, cuda without a usable GPU says why and runs on the CPU, auto falls back
// silently; the CLI prints exactly the shared note.
#include "quant_device_choice.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace moewb::app {
namespace {

TEST(QuantDeviceChoice, CpuIsTheCpuWithoutANote) {
  std::string note = "stale";
  EXPECT_EQ(quantBackendForDevice(quant::ComputeDevice::Cpu, &note), nullptr);
  EXPECT_TRUE(note.empty());
}

TEST(QuantDeviceChoice, CudaWithoutAGpuSaysWhyAutoIsQuiet) {
  const std::string why = gpuUnavailableReason();
  std::string note;
  const auto cuda = quantBackendForDevice(quant::ComputeDevice::Cuda, &note);
  std::string auto_note = "stale";
  const auto automatic = quantBackendForDevice(quant::ComputeDevice::Auto, &auto_note);
  EXPECT_TRUE(auto_note.empty()) << "auto falls back silently";
  if (why.empty()) {  // a usable GPU: both give the GPU backend
    EXPECT_NE(cuda, nullptr);
    EXPECT_NE(automatic, nullptr);
    EXPECT_TRUE(note.empty());
    return;
  }
  EXPECT_EQ(cuda, nullptr);
  EXPECT_EQ(automatic, nullptr);
  EXPECT_EQ(note, "no CUDA device: quantizing on the CPU (" + why + ")");
#ifndef MOEWB_HAVE_CUDA
  EXPECT_EQ(why, "this moewb was built without CUDA");
#endif
  // The CLI says the same note once, naming the command, and quantizes on the CPU.
  std::string out, err;
  ASSERT_EQ(test::runCli(
                "quantize --method rtn --only 'model.layers.0.self_attn.q_proj.weight' --device cuda --json",
                &out, &err),
            0)
      << err;
  EXPECT_EQ(err, "moewb quantize: " + note + "\n");
  EXPECT_EQ(nlohmann::json::parse(out).at("device"), "cpu");
}

}  // namespace
}  // namespace moewb::app

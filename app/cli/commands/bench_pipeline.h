// SPDX-License-Identifier: MIT
#pragma once
#include <cstdint>
#include <string>

namespace moewb::cli {

// `moewb bench quantize --synthetic MODEL`: quantizeModel (the same pipeline as `moewb quantize
// --device cuda`) over a SyntheticModelSource with a rank policy, reporting where the time went.
struct SyntheticBenchArgs {
  std::string command;  // for messages: "bench quantize"
  std::string preset;   // quant::syntheticModelPreset name
  std::string policy = "dense-512+kurtosis-16";
  int layers = 0;  // 0: the preset's
  std::string device = "cuda";
  int gpu_batch = 32;
  int iterations = 20;
  std::string compensator = "int3";
  uint64_t seed = 1;
  bool json = false;
  std::string output;  // also write the JSON report here
};
void runSyntheticQuantizeBench(const SyntheticBenchArgs& args);

}  // namespace moewb::cli

// SPDX-License-Identifier: MIT
#pragma once
#include <QString>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "moewb/progress.h"

namespace moewb::gui {

// The GUI's view of `moewb bench-gpu gemm` (gpu/include/moewb/gpu/bench.h). Only gpu_benchmark.cpp knows
// whether moewb_gpu was linked (MOEWB_HAVE_CUDA); everything here compiles and links without CUDA.

struct GpuAvailability {
  bool builtWithCuda = false;
  bool deviceUsable = false;
  QString device;   // "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)" when usable
  QString message;  // why the benchmark cannot run, in plain words; empty when it can
};
// Asks the CUDA runtime once per process (it can take a second to initialise): call it off the GUI thread.
GpuAvailability probeGpu();

struct GpuGemmSettings {
  std::vector<std::pair<int64_t, int64_t>> shapes;  // (n, k) = (out, in) features
  // Parallel to shapes, or empty: what each shape is (the loaded model's matrices; "" for others).
  std::vector<std::string> shapeLabels;
  std::vector<int64_t> batches;                     // m
  int compensatorRank = 32;                         // 0: skip the fused compensator (INT3 U, V) timing
  int replays = 25;
  bool symmetric = false;
  bool bf16 = false;      // bf16 activations
  bool baselines = true;  // cuBLAS fp16 and dequantize + cuBLAS
};
// The defaults of `moewb bench-gpu gemm`: Mixtral and DeepSeek-MoE expert shapes, m = 1…64.
std::vector<std::pair<int64_t, int64_t>> defaultGemmShapes();
std::vector<int64_t> defaultGemmBatches();

// One row of the result table, the fields of gpu::GemmBenchRow.
struct GpuGemmRow {
  int64_t n = 0, k = 0, m = 0;
  QString label;  // GpuGemmSettings::shapeLabels of the shape
  int ctas = 0;  // CTAs the W3A16 call ran on
  double w3a16Us = 0, w3a16CompUs = 0, cublasUs = 0, dequantCublasUs = 0;
  double tflops = 0, gbps = 0, pctOfCopy = 0;
  double speedupVsCublas = 0, speedupVsDequant = 0;
  double relErrCpu = 0, relErrVsCublas = 0;
  bool correct = false;
};
struct GpuGemmResult {
  QString device;
  double copyGbps = 0;
  std::vector<GpuGemmRow> rows;
  bool allCorrect = true;
  QString markdown;  // the table `moewb bench-gpu gemm` prints
};

// Runs gpu::runGemmBenchmark (as `moewb bench gemm` does) with `progress`, which sees every measurement; a
// cancel takes effect at the benchmark's next check, between measurements (a CUDA call cannot be
// interrupted). Throws moewb::Error with the GPU's reason when it cannot run, moewb::Cancelled when cancelled.
GpuGemmResult runGpuGemmBenchmark(const GpuGemmSettings& settings, const ProgressFn& progress);

}  // namespace moewb::gui

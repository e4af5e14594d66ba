// SPDX-License-Identifier: MIT
#pragma once
// Kernel and quantizer benchmarks shared by `moewb bench gemm|quantize`, the GUI's GPU benchmark panel and the
// CUDA-only driver
// gpu/tools/moewb_gpu_bench.cpp. Timing (docs/benchmarks.md, method): CUDA events around
// CUDA-graph replays, warm-up, median of >= 20 replays (per-call times as GraphTiming below), weight
// buffers rotated so that they exceed L2, baselines (cuBLAS fp16, dequantize + cuBLAS) in the same process,
// and a correctness check against a CPU reference on fresh random data with a poisoned output buffer in
// every run.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moewb/gpu/device.h"

namespace moewb::gpu {

using LogFn = std::function<void(const std::string&)>;
// Progress in the core's habit (moewb::ProgressFn, which this CUDA-only library cannot include): fraction in
// [0, 1] and what runs now; returning false stops the benchmark at its next check, between measurements (a
// CUDA call in flight is not interrupted: a check is at most one measurement, about a second, away). The
// benchmark then returns a Status whose cancelled() is true and leaves the report untouched.
using BenchProgressFn = std::function<bool(double fraction, std::string_view stage)>;

// Per-call time from timed graph replays. Every replay of a graph also pays costs that are not the calls':
// the launch's latency (the stream is idle when the start event is recorded), the first call's start
// without a predecessor to overlap with, the last call's tail. Measured on the H100 they add ~6 us per
// replay, 0.3 us per call in a 20-call graph. So each round times a short graph (short_calls calls) and a
// long one (long_calls) back to back, and the steady-state time per call is the median over rounds of
// (long - short) / (long_calls - short_calls); the per-call average of the short graph is kept beside it.
struct GraphTiming {
  double per_call_us = 0;  // steady state: median of the rounds' slopes
  double graph_us = 0;     // median of the short graph's replay time / short_calls
};
GraphTiming graphTimingFromReplays(const std::vector<double>& short_replay_us, const std::vector<double>& long_replay_us,
                                   int short_calls, int long_calls);

struct GemmBenchOptions {
  std::vector<std::pair<int64_t, int64_t>> shapes = {{14336, 4096}, {4096, 14336}, {1408, 2048}, {2048, 1408}};  // (n, k)
  // Optional, parallel to shapes: what each shape is (a loaded model's matrices, `bench gemm --model`),
  // carried into the rows and shown in the reports.
  std::vector<std::string> shape_labels;
  std::vector<int64_t> batches = {1, 2, 4, 8, 16, 32, 64};
  bool symmetric = false;       // zero fixed at 4 (no zeros stored)
  int compensator_rank = 32;    // also time the fused low-rank compensator (MiLo's INT3 U, V) at this rank (0 = skip)
  bool bf16 = false;            // bf16 activations (and bf16 cuBLAS baseline; no dequantize+cuBLAS baseline)
  int replays = 25;             // timed graph replays (median reported)
  int ctas = 0;                 // CTAs of the W3A16 call (W3A16Config::ctas; 0 = the kernel's own choice)
  bool baselines = true;        // cuBLAS fp16 and dequantize + cuBLAS
  uint64_t seed = 0;            // 0 = from the clock (fresh data each run)
};

struct GemmBenchRow {
  int64_t n = 0, k = 0, m = 0;
  std::string label;             // GemmBenchOptions::shape_labels of the shape ("" without)
  int ctas = 0;                  // CTAs the W3A16 call ran on (w3a16Ctas)
  // Steady-state times per call (GraphTiming::per_call_us).
  double w3a16_us = 0, w3a16_comp_us = 0, cublas_us = 0, dequant_cublas_us = 0;
  // The same plain W3A16 call and cuBLAS averaged over one replay of a graph of graph_calls calls, fixed
  // costs included (GraphTiming::graph_us): how the benchmark measured until the twentieth session.
  double w3a16_graph_us = 0, cublas_graph_us = 0;
  int graph_calls = 0;
  double bytes = 0;              // weights + scales/zeros + X + Y of the W3A16 call
  double tflops = 0, gbps = 0, pct_of_copy = 0;
  double speedup_vs_cublas = 0, speedup_vs_dequant = 0, comp_overhead_pct = 0;  // overhead vs w3a16_us
  double rel_err_cpu = 0, rel_err_comp_cpu = 0, rel_err_vs_cublas = 0;
  bool correct = false;
};

struct GemmBenchReport {
  DeviceInfo device;
  double copy_gbps = 0;   // device-to-device copy, bytes read + written
  uint64_t seed = 0;
  std::vector<GemmBenchRow> rows;
  bool all_correct = true;
};

Status runGemmBenchmark(const GemmBenchOptions& options, GemmBenchReport* report, const LogFn& log = {},
                        const BenchProgressFn& progress = {});
std::string gemmReportMarkdown(const GemmBenchReport& report);
std::string gemmReportJson(const GemmBenchReport& report);

struct QuantizeBenchOptions {
  int64_t n = 14336, k = 4096;   // the acceptance matrix
  int rank = 32, iterations = 20;
  int svd_steps = 30;            // subspace steps of the HQQ-then-SVD baseline
  int repeats = 3;
  int64_t check_rows = 256;      // rows compared with the CPU HQQ reference
  bool model_estimate = true;    // time the shapes of a Mixtral-8x7B-like model and extrapolate
  uint64_t seed = 0;
};

struct QuantizeBenchReport {
  DeviceInfo device;
  double hqq_ms = 0, milo_ms = 0, hqq_svd_ms = 0;
  double hqq_err = 0, milo_err = 0, hqq_svd_err = 0;
  std::vector<double> milo_history;
  double code_mismatch_fraction = 0, max_zero_diff = 0, max_scale_rel_diff = 0;  // GPU vs CPU HQQ
  bool matches_cpu = false;
  // Mixtral-8x7B-shaped model with dense-512 + kurtosis-16 (see docs/benchmarks.md).
  double expert_batch_ms = 0, expert_batch_ms_w2 = 0, attn_q_ms = 0, attn_kv_ms = 0, model_estimate_s = 0;
};

Status runQuantizeBenchmark(const QuantizeBenchOptions& options, QuantizeBenchReport* report, const LogFn& log = {},
                            const BenchProgressFn& progress = {});
std::string quantizeReportMarkdown(const QuantizeBenchReport& report, const QuantizeBenchOptions& options);
std::string quantizeReportJson(const QuantizeBenchReport& report, const QuantizeBenchOptions& options);

// CPU reference of core's quantizeHqq (plain C++, for the device run where core is not built): same
// arithmetic, row-major x [rows][k], outputs codes [rows][k], scales/zeros [rows][k/64].
void hqqReferenceHost(const float* x, int64_t rows, int64_t k, uint8_t* codes, float* scales, float* zeros,
                      double lp_norm = 0.7, double beta = 10.0, double kappa = 1.01, int max_steps = 20, int patience = 1);

}  // namespace moewb::gpu

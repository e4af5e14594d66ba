// SPDX-License-Identifier: MIT
// `moewb bench gemm|quantize` (and the older `moewb bench-gpu gemm|quantize`): the GPU kernel and
// quantizer benchmarks (gpu/include/moewb/gpu/bench.h), and `bench quantize --synthetic MODEL`, the
// whole quantization pipeline on a generated model (bench_pipeline.h). Without CUDA in the build, or
// without a usable GPU, they say so and exit with code 1.
#include "bench_gpu.h"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "bench_pipeline.h"
#include "command_registry.h"
#include "moewb/error.h"

#ifdef MOEWB_HAVE_CUDA
#include "moewb/gpu/bench.h"
#include "moewb/gpu/device.h"
#endif

namespace moewb::cli {
namespace {

struct BenchGpuArgs {
  std::string command;              // "bench" or "bench-gpu", for messages
  std::vector<std::string> shapes;  // "NxK"
  std::vector<int64_t> batches;
  int split_k = 0, stages = 0, kernel = 0, rank = 32, replays = 25, iterations = 20;
  int64_t quant_n = 14336, quant_k = 4096;
  bool symmetric = false, no_baselines = false, no_model = false, json = false, bf16 = false, fp16_compensator = false;
  std::string output;
  SyntheticBenchArgs synthetic;  // `quantize --synthetic MODEL`
};

#ifndef MOEWB_HAVE_CUDA
[[noreturn]] void noCudaBuild(const BenchGpuArgs& a, const char* what) {
  throw Error(
      fmt::format("this moewb was built without CUDA: `moewb {} {}` needs it (rebuild with the CUDA toolkit)",
                  a.command, what));
}
#endif

#ifdef MOEWB_HAVE_CUDA
void requireGpu(const BenchGpuArgs& a, const char* what) {
  std::string why;
  if (!gpu::deviceAvailable(&why))
    throw Error(fmt::format("`moewb {} {}` needs a CUDA GPU: {}", a.command, what, why));
}

void emit(const BenchGpuArgs& a, const std::string& table, const std::string& json) {
  std::printf("%s\n", a.json ? json.c_str() : table.c_str());
  if (!a.output.empty()) {
    std::ofstream f(a.output);
    if (!f) throw Error(fmt::format("{}: cannot write {}", a.command, a.output));
    f << json << "\n";
  }
}
#endif

void runGemm(const BenchGpuArgs& a) {
#ifdef MOEWB_HAVE_CUDA
  requireGpu(a, "gemm");
  gpu::GemmBenchOptions o;
  if (!a.shapes.empty()) {
    o.shapes.clear();
    for (const auto& s : a.shapes) {
      const auto x = s.find('x');
      if (x == std::string::npos) throw Error("--shapes: expected NxK (out x in), got '" + s + "'");
      o.shapes.emplace_back(std::stoll(s.substr(0, x)), std::stoll(s.substr(x + 1)));
    }
  }
  if (!a.batches.empty()) o.batches = a.batches;
  o.split_k = a.split_k;
  o.stages = a.stages;
  o.kernel = a.kernel;
  o.bf16 = a.bf16;
  o.fp16_compensator = a.fp16_compensator;
  o.compensator_rank = a.rank;
  o.replays = a.replays;
  o.symmetric = a.symmetric;
  o.baselines = !a.no_baselines;
  gpu::GemmBenchReport rep;
  const gpu::Status s = gpu::runGemmBenchmark(o, &rep, [](const std::string& l) { std::fprintf(stderr, "%s\n", l.c_str()); });
  if (!s.ok()) throw Error(a.command + " gemm: " + s.message);
  emit(a, gpu::gemmReportMarkdown(rep), gpu::gemmReportJson(rep));
  if (!rep.all_correct) throw Error(a.command + " gemm: a correctness check failed (see the table)");
#else
  noCudaBuild(a, "gemm");
#endif
}

void runQuantize(const BenchGpuArgs& a) {
  if (!a.synthetic.preset.empty()) {
    SyntheticBenchArgs s = a.synthetic;
    s.command = a.command + " quantize";
    s.iterations = a.iterations;
    s.json = a.json;
    s.output = a.output;
    runSyntheticQuantizeBench(s);  // says itself when it needs a GPU that is not there
    return;
  }
#ifdef MOEWB_HAVE_CUDA
  requireGpu(a, "quantize");
  gpu::QuantizeBenchOptions o;
  o.n = a.quant_n;
  o.k = a.quant_k;
  o.rank = a.rank;
  o.iterations = a.iterations;
  o.model_estimate = !a.no_model;
  gpu::QuantizeBenchReport rep;
  const gpu::Status s = gpu::runQuantizeBenchmark(o, &rep, [](const std::string& l) { std::fprintf(stderr, "%s\n", l.c_str()); });
  if (!s.ok()) throw Error(a.command + " quantize: " + s.message);
  emit(a, gpu::quantizeReportMarkdown(rep, o), gpu::quantizeReportJson(rep, o));
  if (!rep.matches_cpu) throw Error(a.command + " quantize: GPU HQQ does not match the CPU reference");
#else
  noCudaBuild(a, "quantize");
#endif
}

}  // namespace

void addGpuBenchCommands(CLI::App& parent, const std::string& command) {
  auto args = std::make_shared<BenchGpuArgs>();
  args->command = command;
  auto common = [args](CLI::App* c) {
    c->add_flag("--json", args->json, "Print JSON instead of a Markdown table");
    c->add_option("-o,--output", args->output, "Also write the JSON report to this file");
  };
  CLI::App* gemm = parent.add_subcommand("gemm", "GPU: W3A16 GEMM vs cuBLAS fp16 and dequantize+cuBLAS");
  common(gemm);
  gemm->add_option("--rank", args->rank, "Low-rank compensator rank")->check(CLI::Range(0, 512));
  gemm->add_option("--shapes", args->shapes, "Weight shapes NxK (out x in), default Mixtral and DeepSeek-MoE experts")
      ->delimiter(',');
  gemm->add_option("--m", args->batches, "Batch sizes (1..64), default 1,2,4,8,16,32,64")->delimiter(',');
  gemm->add_option("--split", args->split_k, "Force the split-k factor, or the stream-K kernel's CTAs (0 = automatic)");
  gemm->add_option("--kernel", args->kernel, "Kernel: 0 automatic, 1 streaming, 2 pipelined split-k, 3 stream-K")
      ->check(CLI::Range(0, 3));
  gemm->add_flag("--bf16", args->bf16, "bf16 activations (stream-K kernel; baseline cuBLAS bf16)");
  gemm->add_flag("--fp16-compensator", args->fp16_compensator,
                 "Time the compensator with fp16 U, V (split-k kernels) instead of MiLo's INT3 U, V (stream-K)");
  gemm->add_option("--stages", args->stages, "Pipeline depth for m <= 16 (4 or 6; 0 = automatic)");
  gemm->add_option("--replays", args->replays, "Timed CUDA-graph replays (median reported)")->check(CLI::Range(20, 1000));
  gemm->add_flag("--sym", args->symmetric, "Symmetric weights (zero fixed at 4, no zeros stored)");
  gemm->add_flag("--no-baselines", args->no_baselines, "Skip cuBLAS and dequantize+cuBLAS");
  gemm->callback([args] { runGemm(*args); });
  CLI::App* quant = parent.add_subcommand(
      "quantize",
      "GPU: HQQ and MiLo vs the CPU path on one matrix, and a model-size estimate; with --synthetic MODEL "
      "the whole quantization pipeline (as `moewb quantize --device cuda`) on a generated model");
  common(quant);
  quant->add_option("--rank", args->rank, "MiLo rank of the one-matrix benchmark")->check(CLI::Range(1, 512));
  quant->add_option("--n", args->quant_n, "Rows (out features) of the test matrix");
  quant->add_option("--k", args->quant_k, "Columns (in features), a multiple of 64");
  quant->add_option("--iterations", args->iterations, "MiLo iterations")->check(CLI::Range(1, 1000));
  quant->add_flag("--no-model", args->no_model, "Skip the Mixtral-8x7B-shaped model estimate");
  quant->add_option(
      "--synthetic", args->synthetic.preset,
      "Run the whole pipeline on a generated model: mixtral-8x7b (the acceptance run) or tiny-mixtral");
  quant->add_option("--policy", args->synthetic.policy,
                    "--synthetic: MiLo rank policy (default dense-512+kurtosis-16)");
  quant->add_option("--layers", args->synthetic.layers, "--synthetic: only the first N layers (0: all)")
      ->check(CLI::Range(0, 1000));
  quant->add_option("--device", args->synthetic.device, "--synthetic: cuda (default), cpu or auto")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  quant
      ->add_option("--gpu-batch", args->synthetic.gpu_batch,
                   "--synthetic: most matrices per GPU call (0: memory decides)")
      ->check(CLI::Range(0, 4096));
  quant->add_option("--compensator", args->synthetic.compensator, "--synthetic: int3, int8, fp16 or fp32");
  quant->add_option("--seed", args->synthetic.seed, "--synthetic: seed of the generated weights and of MiLo");
  quant->callback([args] { runQuantize(*args); });
}

namespace {

// The first spelling, kept so that scripts and docs that use it still work.
const CommandRegistrar registrar("bench-gpu", [](CLI::App& root) {
  CLI::App* cmd = root.add_subcommand("bench-gpu", "Same as `moewb bench gemm|quantize` (GPU benchmarks)");
  cmd->require_subcommand(1);
  addGpuBenchCommands(*cmd, "bench-gpu");
});

}  // namespace
}  // namespace moewb::cli

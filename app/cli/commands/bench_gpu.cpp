// SPDX-License-Identifier: MIT
// `moewb bench gemm|quantize` (and the older `moewb bench-gpu gemm|quantize`): the GPU kernel and
// quantizer benchmarks (gpu/include/moewb/gpu/bench.h), and `bench quantize --synthetic MODEL`, the
// whole quantization pipeline on a generated model (bench_pipeline.h). `bench gemm --model` times a
// checkpoint's own matrix shapes (quant/gemm_shapes.h, as the GUI's panel offers them); `--list-shapes`
// only lists them. Without CUDA in the build, or without a usable GPU, they say so and exit with code 1.
// Ctrl-C / SIGTERM stop them between measurements: "cancelled", exit code 130, no report written.
#include "bench_gpu.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "bench_pipeline.h"
#include "cli_progress.h"
#include "command_registry.h"
#include "model_loading.h"
#include "moewb/atomic_file.h"
#include "moewb/error.h"
#include "moewb/progress.h"
#include "moewb/quant/gemm_shapes.h"
#include "moewb/tensor_filter.h"

#ifdef MOEWB_HAVE_CUDA
#include "moewb/gpu/bench.h"
#include "moewb/gpu/device.h"
#endif

namespace moewb::cli {
namespace {

struct BenchGpuArgs {
  std::string command;              // "bench" or "bench-gpu", for messages
  std::vector<std::string> shapes;  // "NxK"
  bool from_model = false;          // --model given (its value empty: the demo model)
  bool list_shapes = false;         // --list-shapes: print the chosen shapes, time nothing
  std::string model, filter;        // --model PATH, --filter EXPR: the shapes of a model's matrices
  std::vector<int64_t> batches;
  int ctas = 0, rank = 32, replays = 25, iterations = 20;
  int64_t quant_n = 14336, quant_k = 4096;
  bool symmetric = false, no_baselines = false, no_model = false, json = false, bf16 = false;
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

// The benchmarks' progress: they stop at their next check once Ctrl-C or SIGTERM arrived. (No bar: they log
// a line per measurement on stderr.)
bool keepGoing(double, std::string_view) { return !interrupted(); }

// A failed benchmark: Cancelled (exit code 130, as every command) when it stopped for Ctrl-C, else an error.
[[noreturn]] void benchFailed(const BenchGpuArgs& a, const char* what, const gpu::Status& s) {
  if (s.cancelled()) throw Cancelled{};
  throw Error(a.command + " " + what + ": " + s.message);
}

void emit(const BenchGpuArgs& a, const std::string& table, const std::string& json) {
  std::printf("%s\n", a.json ? json.c_str() : table.c_str());
  if (!a.output.empty()) writeFileAtomically(a.output, json + "\n");  // never a half-written report
}
#endif

// A shape to time is a quant::ModelGemmShape; one given with --shapes (or a default) has no kinds, no
// first tensor and no matrices.
using ChosenShape = quant::ModelGemmShape;
ChosenShape givenShape(const quant::GemmShape& s) { return {s, 0, "", ""}; }

// The shapes to time: --shapes as given, then with --model the distinct shapes of the model's matrices
// that `moewb quantize` compresses (and --filter selects), labelled with what they are. Empty: the
// benchmark's defaults (Mixtral and DeepSeek-MoE experts). Needs no GPU (`--list-shapes`).
std::vector<ChosenShape> chooseGemmShapes(const BenchGpuArgs& a) {
  if (!a.filter.empty() && !a.from_model) throw Error(a.command + " gemm: --filter selects a model's matrices: it needs --model");
  std::vector<ChosenShape> chosen;
  for (const auto& text : a.shapes) chosen.push_back(givenShape(quant::parseGemmShape(text, "--shapes")));
  if (a.from_model) {
    const auto catalog = openModel(a.model);
    const auto model_shapes = quant::modelGemmShapes(*catalog, TensorFilter::parse(a.filter));
    if (model_shapes.empty())
      throw Error(fmt::format("{} gemm: {} has no matrix to quantize{}", a.command,
                              a.model.empty() ? std::string("the demo model") : a.model,
                              a.filter.empty() ? std::string() : fmt::format(" that matches --filter '{}'", a.filter)));
    chosen.insert(chosen.end(), model_shapes.begin(), model_shapes.end());
  }
  return chosen;
}

// Why a shape cannot run, or "".
std::string whyNotRunnable(const quant::GemmShape& s) {
  return quant::w3a16KernelTakes(s) ? std::string() : "the W3A16 kernels need N and K to be multiples of 64";
}

void listShapes(const BenchGpuArgs& a, std::vector<ChosenShape> chosen) {
  if (chosen.empty())
    for (const auto& s : quant::defaultBenchGemmShapes()) chosen.push_back(givenShape(s));
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& c : chosen) {
      const std::string why = whyNotRunnable(c.shape);
      nlohmann::json row = {{"n", c.shape.n}, {"k", c.shape.k}, {"runnable", why.empty()}};
      if (!c.kinds.empty()) row.update({{"label", c.kinds}, {"matrices", c.matrices}, {"first_tensor", c.first_tensor}});
      if (!why.empty()) row["why_not"] = why;
      rows.push_back(row);
    }
    std::printf("%s\n", nlohmann::json{{"shapes", rows}}.dump(2).c_str());
    return;
  }
  std::printf("| n x k | matrices | what | first tensor | runs |\n|---|---|---|---|---|\n");
  for (const auto& c : chosen) {
    const std::string why = whyNotRunnable(c.shape);
    std::printf("| %lldx%lld | %s | %s | %s | %s |\n", static_cast<long long>(c.shape.n), static_cast<long long>(c.shape.k),
                c.matrices ? std::to_string(c.matrices).c_str() : "", c.kinds.c_str(),
                c.first_tensor.c_str(), why.empty() ? "yes" : ("no: " + why).c_str());
  }
}

#ifdef MOEWB_HAVE_CUDA
// The chosen shapes into the benchmark's options; those the kernels cannot hold are said on stderr and
// left out (none left is an error).
void setGemmShapes(const BenchGpuArgs& a, const std::vector<ChosenShape>& chosen, gpu::GemmBenchOptions* o) {
  if (chosen.empty()) return;
  o->shapes.clear();
  o->shape_labels.clear();
  for (const auto& c : chosen) {
    if (const std::string why = whyNotRunnable(c.shape); !why.empty()) {
      std::fprintf(stderr, "%s gemm: skipping %lldx%lld%s: %s\n", a.command.c_str(), static_cast<long long>(c.shape.n),
                   static_cast<long long>(c.shape.k), c.kinds.empty() ? "" : (" (" + c.kinds + ")").c_str(), why.c_str());
      continue;
    }
    o->shapes.emplace_back(c.shape.n, c.shape.k);
    if (a.from_model) o->shape_labels.push_back(c.kinds.empty() ? std::string("(--shapes)") : c.kinds);
  }
  if (o->shapes.empty())
    throw Error(a.command + " gemm: no shape left that the W3A16 kernels can run (N and K must be multiples of 64)");
}
#endif

void runGemm(const BenchGpuArgs& a) {
  const std::vector<ChosenShape> chosen = chooseGemmShapes(a);  // bad shapes, models and filters first
  if (a.list_shapes) {
    listShapes(a, chosen);
    return;
  }
#ifdef MOEWB_HAVE_CUDA
  requireGpu(a, "gemm");
  gpu::GemmBenchOptions o;
  setGemmShapes(a, chosen, &o);
  if (!a.batches.empty()) o.batches = a.batches;
  o.ctas = a.ctas;
  o.bf16 = a.bf16;
  o.compensator_rank = a.rank;
  o.replays = a.replays;
  o.symmetric = a.symmetric;
  o.baselines = !a.no_baselines;
  gpu::GemmBenchReport rep;
  const gpu::Status s =
      gpu::runGemmBenchmark(o, &rep, [](const std::string& l) { std::fprintf(stderr, "%s\n", l.c_str()); }, keepGoing);
  if (!s.ok()) benchFailed(a, "gemm", s);
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
  const gpu::Status s =
      gpu::runQuantizeBenchmark(o, &rep, [](const std::string& l) { std::fprintf(stderr, "%s\n", l.c_str()); }, keepGoing);
  if (!s.ok()) benchFailed(a, "quantize", s);
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
  gemm->add_option("--rank", args->rank,
                   "Also time the fused low-rank compensator (MiLo's INT3 U, V) at this rank: 0 (skip) or a multiple "
                   "of 16 up to 128")
      ->check(CLI::Range(0, 128));
  gemm->add_option("--shapes", args->shapes, "Weight shapes NxK (out x in), default Mixtral and DeepSeek-MoE experts")
      ->delimiter(',');
  gemm->add_option("--model", args->model,
                   "Also time the distinct shapes of this checkpoint's matrices (those `moewb quantize` "
                   "compresses); without a value: the embedded demo model")
      ->expected(0, 1);
  gemm->add_option("--filter", args->filter,
                   "--model: only matrices matching this filter (`moewb stats --filter` syntax, e.g. "
                   "'block:expert layer:0')");
  gemm->add_flag("--list-shapes", args->list_shapes,
                 "Print the shapes that would be timed (what they are, whether the kernels take them) and exit; "
                 "needs no GPU");
  gemm->add_option("--m", args->batches, "Batch sizes (1..64), default 1,2,4,8,16,32,64")->delimiter(',');
  gemm->add_option("--ctas", args->ctas, "Force the kernel's number of CTAs (0 = automatic: one wave of resident CTAs)")
      ->check(CLI::NonNegativeNumber);
  gemm->add_flag("--bf16", args->bf16, "bf16 activations (baseline cuBLAS bf16)");
  gemm->add_option("--replays", args->replays, "Timed rounds, each one replay of a graph of >= 20 calls and one of >= 80 calls more (median per-call slope reported)")->check(CLI::Range(20, 1000));
  gemm->add_flag("--sym", args->symmetric, "Symmetric weights (zero fixed at 4, no zeros stored)");
  gemm->add_flag("--no-baselines", args->no_baselines, "Skip cuBLAS and dequantize+cuBLAS");
  gemm->callback([args, gemm] {
    args->from_model = gemm->get_option("--model")->count() > 0;
    runGemm(*args);
  });
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

// SPDX-License-Identifier: MIT
// CUDA-only driver for the GPU benchmarks (the same code as `moewb bench gemm|quantize`), for machines where
// the rest of moewb is not built:  moewb_gpu_bench gemm|quantize [--json FILE] [--m 1,16] [--shapes 14336x4096]
//                                    [--ctas N] [--sym] [--bf16] [--rank R] [--replays N] [--no-model]
// Ctrl-C / SIGTERM stop it between measurements (exit code 130).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "moewb/gpu/bench.h"
#include "moewb/gpu/device.h"

namespace {
volatile std::sig_atomic_t g_interrupted = 0;
void onSignal(int) { g_interrupted = 1; }

std::vector<std::string> split(const std::string& s, char c) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, c))
    if (!item.empty()) out.push_back(item);
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace moewb::gpu;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s gemm|quantize [options]\n", argv[0]);
    return 2;
  }
  const std::string what = argv[1];
  std::string json_path;
  GemmBenchOptions go;
  QuantizeBenchOptions qo;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--json") json_path = next();
    else if (a == "--m") {
      go.batches.clear();
      for (auto& v : split(next(), ',')) go.batches.push_back(std::stoll(v));
    } else if (a == "--shapes") {
      go.shapes.clear();
      for (auto& v : split(next(), ',')) {
        const auto nk = split(v, 'x');
        go.shapes.emplace_back(std::stoll(nk.at(0)), std::stoll(nk.at(1)));
      }
    } else if (a == "--ctas") go.ctas = std::stoi(next());
    else if (a == "--sym") go.symmetric = true;
    else if (a == "--bf16") go.bf16 = true;
    else if (a == "--rank") go.compensator_rank = qo.rank = std::stoi(next());
    else if (a == "--replays") go.replays = std::stoi(next());
    else if (a == "--no-baselines") go.baselines = false;
    else if (a == "--no-model") qo.model_estimate = false;
    else if (a == "--iterations") qo.iterations = std::stoi(next());
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  std::string why;
  if (!deviceAvailable(&why)) {
    std::fprintf(stderr, "moewb_gpu_bench: %s\n", why.c_str());
    return 3;
  }
  auto log = [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  auto progress = [](double, std::string_view) { return g_interrupted == 0; };
  auto failed = [](const Status& s) {
    std::fprintf(stderr, "moewb_gpu_bench: %s\n", s.message.c_str());
    return s.cancelled() ? 130 : 1;
  };
  std::string json, table;
  bool ok = true;
  if (what == "gemm") {
    GemmBenchReport rep;
    const Status s = runGemmBenchmark(go, &rep, log, progress);
    if (!s.ok()) return failed(s);
    table = gemmReportMarkdown(rep);
    json = gemmReportJson(rep);
    ok = rep.all_correct;
  } else if (what == "quantize") {
    QuantizeBenchReport rep;
    const Status s = runQuantizeBenchmark(qo, &rep, log, progress);
    if (!s.ok()) return failed(s);
    table = quantizeReportMarkdown(rep, qo);
    json = quantizeReportJson(rep, qo);
    ok = rep.matches_cpu && rep.milo_err <= rep.hqq_svd_err * 1.0001;
  } else {
    std::fprintf(stderr, "unknown benchmark %s (gemm or quantize)\n", what.c_str());
    return 2;
  }
  std::printf("%s\n", table.c_str());
  if (!json_path.empty()) std::ofstream(json_path) << json << "\n";
  if (!ok) std::fprintf(stderr, "moewb_gpu_bench: a correctness check FAILED (see the table)\n");
  return ok ? 0 : 4;
}

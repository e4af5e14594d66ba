// SPDX-License-Identifier: MIT
#include "gpu_benchmark.h"

#include <QObject>

#include "moewb/error.h"
#include "moewb/quant/gemm_shapes.h"

#ifdef MOEWB_HAVE_CUDA
#include "moewb/gpu/bench.h"
#include "moewb/gpu/device.h"
#endif

namespace moewb::gui {

#ifdef MOEWB_HAVE_CUDA

GpuAvailability probeGpu() {
  GpuAvailability a;
  a.builtWithCuda = true;
  std::string why;
  if (!gpu::deviceAvailable(&why)) {
    a.message = QObject::tr(
                    "The GPU benchmark cannot run on this machine: %1. It needs an NVIDIA GPU "
                    "(A100 or newer) with a driver for CUDA %2.")
                    .arg(QString::fromStdString(why), QStringLiteral(MOEWB_CUDA_VERSION));
    return a;
  }
  gpu::DeviceInfo info;
  if (const gpu::Status s = gpu::deviceInfo(&info); !s.ok()) {
    a.message = QObject::tr("The CUDA GPU cannot be queried: %1").arg(QString::fromStdString(s.message));
    return a;
  }
  a.deviceUsable = true;
  a.device = QObject::tr("%1 (sm_%2%3, %4 SMs, %5 GB)")
                 .arg(QString::fromStdString(info.name))
                 .arg(info.major)
                 .arg(info.minor)
                 .arg(info.multiprocessors)
                 .arg(double(info.global_memory_bytes) / 1e9, 0, 'f', 0);
  return a;
}

std::vector<std::pair<int64_t, int64_t>> defaultGemmShapes() {
  return gpu::GemmBenchOptions{}.shapes;
}
std::vector<int64_t> defaultGemmBatches() {
  return gpu::GemmBenchOptions{}.batches;
}

GpuGemmResult runGpuGemmBenchmark(const GpuGemmSettings& settings, const ProgressFn& progress) {
  if (const GpuAvailability a = probeGpu(); !a.deviceUsable) throw Error(a.message.toStdString());
  gpu::GemmBenchOptions o;  // everything else as `moewb bench gemm` leaves it
  o.shapes = settings.shapes;
  o.shape_labels = settings.shapeLabels;
  o.batches = settings.batches;
  o.compensator_rank = settings.compensatorRank;
  o.replays = settings.replays;
  o.symmetric = settings.symmetric;
  o.bf16 = settings.bf16;
  o.baselines = settings.baselines;
  gpu::GemmBenchReport merged;
  const gpu::Status s = gpu::runGemmBenchmark(o, &merged, {}, progress);
  if (s.cancelled()) throw Cancelled();
  if (!s.ok()) throw Error("W3A16 benchmark: " + s.message);
  GpuGemmResult result;
  result.device = QString::fromStdString(merged.device.name);
  result.copyGbps = merged.copy_gbps;
  result.allCorrect = merged.all_correct;
  result.markdown = QString::fromStdString(gpu::gemmReportMarkdown(merged));
  for (const gpu::GemmBenchRow& r : merged.rows) {
    GpuGemmRow row;
    row.n = r.n;
    row.k = r.k;
    row.m = r.m;
    row.label = QString::fromStdString(r.label);
    row.ctas = r.ctas;
    row.w3a16Us = r.w3a16_us;
    row.w3a16CompUs = r.w3a16_comp_us;
    row.cublasUs = r.cublas_us;
    row.dequantCublasUs = r.dequant_cublas_us;
    row.tflops = r.tflops;
    row.gbps = r.gbps;
    row.pctOfCopy = r.pct_of_copy;
    row.speedupVsCublas = r.speedup_vs_cublas;
    row.speedupVsDequant = r.speedup_vs_dequant;
    row.relErrCpu = r.rel_err_cpu;
    row.relErrVsCublas = r.rel_err_vs_cublas;
    row.correct = r.correct;
    result.rows.push_back(row);
  }
  return result;
}

#else  // built without the CUDA toolkit: the panel says so, nothing links against CUDA

GpuAvailability probeGpu() {
  GpuAvailability a;
  a.message = QObject::tr(
      "This MoE Workbench was built without CUDA, so the GPU benchmark is not available "
      "(`moewb bench-gpu gemm` says the same). Rebuild with the CUDA toolkit installed "
      "to run it.");
  return a;
}

// The same defaults as gpu::GemmBenchOptions, shown so the selectors look as they would with CUDA.
std::vector<std::pair<int64_t, int64_t>> defaultGemmShapes() {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (const auto& s : quant::defaultBenchGemmShapes()) shapes.emplace_back(s.n, s.k);
  return shapes;
}
std::vector<int64_t> defaultGemmBatches() {
  return {1, 2, 4, 8, 16, 32, 64};
}

GpuGemmResult runGpuGemmBenchmark(const GpuGemmSettings&, const ProgressFn&) {
  throw Error(probeGpu().message.toStdString());
}

#endif

}  // namespace moewb::gui

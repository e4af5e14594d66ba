// SPDX-License-Identifier: MIT
#include "engine_device.h"

#include <fmt/format.h>

#include <cstdio>

#include "moewb/parallel.h"

#ifdef MOEWB_HAVE_CUDA
#include "moewb/gpu/cublas_linear_backend.h"
#endif

namespace moewb::cli {

void addEngineDeviceOptions(CLI::App& cmd, EngineDeviceArgs& args) {
  cmd.add_option(
         "--device", args.device,
         "Where the weight GEMMs run: auto (the GPU when present), cpu, or cuda (cuBLAS; falls back to "
         "the CPU with a message when no GPU can be used)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd.add_flag("--tf32", args.tf32,
               "On the GPU, use TF32 tensor cores (faster, ~1e-3 relative error per GEMM) instead of exact "
               "float32");
}

EngineDevice useEngineDevice(engine::MoeEngine& engine, const EngineDeviceArgs& args,
                             const std::string& command) {
  EngineDevice d;
  d.description = fmt::format("CPU, {} worker threads", workerThreads());
  if (args.device == "cpu") {
    engine.setLinearBackend(nullptr);
    return d;
  }
  const bool asked = args.device == "cuda";
#ifdef MOEWB_HAVE_CUDA
  gpu::CublasBackendOptions options;
  options.gemm.tf32 = args.tf32;
  std::string why;
  if (auto backend = gpu::CublasLinearBackend::create(options, &why)) {
    d.device = "cuda";
    d.description = backend->deviceDescription();
    d.tf32 = args.tf32;
    d.backend = backend;
    engine.setLinearBackend(std::move(backend));
    return d;
  }
  d.fallback_reason = why;
#else
  d.fallback_reason = "this moewb was built without CUDA";
#endif
  if (asked)
    std::fprintf(stderr, "moewb %s: --device cuda: %s; running on the CPU\n", command.c_str(),
                 d.fallback_reason.c_str());
  engine.setLinearBackend(nullptr);
  return d;
}

nlohmann::json EngineDevice::toJson() const {
  nlohmann::json j = {{"device", device}, {"device_name", description}};
  if (!fallback_reason.empty()) j["device_fallback_reason"] = fallback_reason;
#ifdef MOEWB_HAVE_CUDA
  if (auto* cuda = dynamic_cast<const gpu::CublasLinearBackend*>(backend.get())) {
    const auto s = cuda->stats();
    j["tf32"] = tf32;
    j["gemms_on_gpu"] = s.gpu_calls;
    j["gemms_on_cpu"] = s.cpu_calls;  // too small to pay for their transfers, or did not fit
    j["gemm_gflop_on_gpu"] = s.gpu_flops / 1e9;
    j["gemm_gflop_on_cpu"] = s.cpu_flops / 1e9;
    j["uploaded_bytes"] = s.uploaded_bytes;
    if (s.out_of_memory_fallbacks) j["gemms_too_large_for_gpu"] = s.out_of_memory_fallbacks;
  }
#endif
  return j;
}

std::string EngineDevice::summary() const {
  if (device == "cuda") return fmt::format("cuda ({}, {})", description, tf32 ? "tf32" : "float32");
  return fmt::format("cpu ({} worker threads)", workerThreads());
}

}  // namespace moewb::cli

// SPDX-License-Identifier: MIT
#include "engine_device.h"

#include <fmt/format.h>

#include <cstdio>

#include "moewb/error.h"
#include "moewb/parallel.h"
#include "moewb/quant/rank_policy.h"

#ifdef MOEWB_HAVE_CUDA
#include "moewb/gpu/cublas_linear_backend.h"
#include "moewb/gpu/device_engine.h"
#endif

namespace moewb::cli {

void addEngineDeviceOptions(CLI::App& cmd, EngineDeviceArgs& args) {
  cmd.add_option("--device", args.device,
                 "Where the model runs: auto (the GPU when present), cpu, or cuda (the whole forward pass on "
                 "the GPU; falls back to the CPU with a message when no GPU can be used)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd.add_option("--gpu-precision", args.gpu_precision,
                 "On the GPU: bf16 (bf16 weights and GEMM inputs, float32 accumulation and activations) or "
                 "fp32 (float32 throughout, to compare with the CPU engine)")
      ->check(CLI::IsMember({"bf16", "fp32"}));
  cmd.add_option("--gpu-memory", args.gpu_memory,
                 "GPU memory the engine may use, e.g. 8GB or 512MiB (default: the free memory less 10%); "
                 "weights beyond it are streamed to the GPU layer by layer");
  cmd.add_flag("--tf32", args.tf32,
               "For passes the GPU engine cannot run (they run on the CPU with their GEMMs on cuBLAS): use "
               "TF32 tensor cores instead of exact float32");
}

EngineDevice useEngineDevice(engine::MoeEngine& engine, const EngineDeviceArgs& args,
                             const std::string& command) {
  EngineDevice d;
  d.description = fmt::format("CPU, {} worker threads", workerThreads());
  engine.setForwardBackend(nullptr);
  engine.setLinearBackend(nullptr);
  if (args.device == "cpu") return d;
  const bool asked = args.device == "cuda";
#ifdef MOEWB_HAVE_CUDA
  gpu::DeviceEngineOptions options;
  options.precision = args.gpu_precision == "fp32" ? gpu::DeviceEngineOptions::Precision::Fp32
                                                   : gpu::DeviceEngineOptions::Precision::Bf16;
  if (!args.gpu_memory.empty()) {
    const int64_t bytes = quant::parseByteSize(args.gpu_memory);
    if (bytes < (int64_t(64) << 20))
      throw Error(fmt::format("--gpu-memory {}: expected a size of at least 64MB", args.gpu_memory));
    options.memory_limit = static_cast<uint64_t>(bytes);
  }
  std::string why;
  if (auto device_engine = gpu::DeviceEngine::create(options, &why)) {
    d.device = "cuda";
    d.description = device_engine->deviceDescription();
    d.gpu_precision = args.gpu_precision;
    d.tf32 = args.tf32;
    d.forward_backend = device_engine;
    engine.setForwardBackend(std::move(device_engine));
    gpu::CublasBackendOptions gemm_options;
    gemm_options.gemm.tf32 = args.tf32;
    if (auto backend = gpu::CublasLinearBackend::create(gemm_options, nullptr)) {
      d.backend = backend;
      engine.setLinearBackend(std::move(backend));
    }
    return d;
  }
  d.fallback_reason = why;
#else
  d.fallback_reason = "this moewb was built without CUDA";
#endif
  if (asked)
    std::fprintf(stderr, "moewb %s: --device cuda: %s; running on the CPU\n", command.c_str(),
                 d.fallback_reason.c_str());
  return d;
}

nlohmann::json EngineDevice::toJson(const engine::MoeEngine* engine) const {
  nlohmann::json j = {{"device", device}, {"device_name", description}};
  if (!fallback_reason.empty()) j["device_fallback_reason"] = fallback_reason;
#ifdef MOEWB_HAVE_CUDA
  if (auto* gpu_engine = dynamic_cast<const gpu::DeviceEngine*>(forward_backend.get())) {
    const auto s = gpu_engine->stats();
    j["gpu_precision"] = gpu_precision;
    j["gpu_memory_limit"] = gpu_engine->options().memory_limit;
    j["weights_uploaded_bytes"] = s.uploaded_weight_bytes;
    j["weights_resident_bytes"] = s.resident_weight_bytes;
    j["weights_evicted_bytes"] = s.evicted_weight_bytes;
    j["gpu_passes"] = s.passes;
    if (s.native_int3_matrices) j["w3a16_matrices"] = s.native_int3_matrices;
    if (s.dequantized_matrices) {
      j["dequantized_matrices"] = s.dequantized_matrices;
      j["dequantized_because"] = s.dequantized_reason;
    }
    if (engine && !engine->forwardFallbackReason().empty())
      j["passes_on_cpu_because"] = engine->forwardFallbackReason();
  }
  if (auto* cuda = dynamic_cast<const gpu::CublasLinearBackend*>(backend.get())) {
    const auto s = cuda->stats();
    if (s.gpu_calls + s.cpu_calls > 0) {
      j["tf32"] = tf32;
      j["cpu_pass_gemms_on_gpu"] = s.gpu_calls;
      j["cpu_pass_gemms_on_cpu"] = s.cpu_calls;
    }
  }
#else
  (void)engine;
#endif
  return j;
}

std::string EngineDevice::summary() const {
  if (device == "cuda") return fmt::format("cuda ({}, {})", description, gpu_precision);
  return fmt::format("cpu ({} worker threads)", workerThreads());
}

}  // namespace moewb::cli

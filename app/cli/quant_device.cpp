// SPDX-License-Identifier: MIT
#include "quant_device.h"

#include <cstdio>

#ifdef MOEWB_HAVE_CUDA
#include "moewb/gpu/device.h"
#include "moewb/gpu/quant_backend.h"
#endif

namespace moewb::cli {

std::string gpuUnavailableReason() {
#ifdef MOEWB_HAVE_CUDA
  std::string why;
  return gpu::deviceAvailable(&why) ? std::string() : why;
#else
  return "this moewb was built without CUDA";
#endif
}

std::unique_ptr<quant::BatchBackend> quantBackendFor(quant::ComputeDevice device,
                                                     const std::string& command) {
  if (device == quant::ComputeDevice::Cpu) return nullptr;
  std::string why;
#ifdef MOEWB_HAVE_CUDA
  if (auto backend = gpu::makeQuantBackend(&why)) return backend;
#else
  why = gpuUnavailableReason();
#endif
  if (device == quant::ComputeDevice::Cuda)
    std::fprintf(stderr, "moewb %s: no CUDA device: quantizing on the CPU (%s)\n", command.c_str(),
                 why.c_str());
  return nullptr;
}

}  // namespace moewb::cli

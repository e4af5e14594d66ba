// SPDX-License-Identifier: MIT
#include "quant_device_choice.h"

#ifdef MOEWB_HAVE_CUDA
#include "moewb/gpu/device.h"
#include "moewb/gpu/quant_backend.h"
#endif

namespace moewb::app {

std::string gpuUnavailableReason() {
#ifdef MOEWB_HAVE_CUDA
  std::string why;
  return gpu::deviceAvailable(&why) ? std::string() : why;
#else
  return "this moewb was built without CUDA";
#endif
}

std::unique_ptr<quant::BatchBackend> quantBackendForDevice(quant::ComputeDevice device, std::string* note) {
  if (note) note->clear();
  if (device == quant::ComputeDevice::Cpu) return nullptr;
  std::string why;
#ifdef MOEWB_HAVE_CUDA
  if (auto backend = gpu::makeQuantBackend(&why)) return backend;
#else
  why = gpuUnavailableReason();
#endif
  if (note && device == quant::ComputeDevice::Cuda)
    *note = "no CUDA device: quantizing on the CPU (" + why + ")";
  return nullptr;
}

}  // namespace moewb::app

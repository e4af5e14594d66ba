// SPDX-License-Identifier: MIT
#include "engine_device_choice.h"

#include <mutex>

#include "quant_device_choice.h"

#ifdef MOEWB_HAVE_CUDA
#include "moewb/gpu/device_engine.h"
#endif

namespace moewb::app {

std::shared_ptr<engine::ForwardBackend> sharedGpuEngine(std::string* why) {
  static std::mutex mutex;
  static std::shared_ptr<engine::ForwardBackend> engine;
  static std::string reason;
  const std::lock_guard lock(mutex);
#ifdef MOEWB_HAVE_CUDA
  if (!engine && reason.empty()) engine = gpu::DeviceEngine::create({}, &reason);
#else
  if (reason.empty()) reason = gpuUnavailableReason();
#endif
  if (why) *why = reason;
  return engine;
}

}  // namespace moewb::app

// SPDX-License-Identifier: MIT
#pragma once
// Where the inference engine runs, for the GUI's engine jobs (perplexity, frequencies, K/V capture, Try it):
// the GPU engine when this build has CUDA and the machine a usable GPU, otherwise the CPU engine. One
// device engine per process, so weights uploaded by one job stay on the GPU for the next one.
#include <memory>
#include <string>

#include "moewb/engine/forward_backend.h"

namespace moewb::app {

// nullptr (the CPU engine) when no GPU can be used; `why` (when given) then says why.
std::shared_ptr<engine::ForwardBackend> sharedGpuEngine(std::string* why = nullptr);

}  // namespace moewb::app

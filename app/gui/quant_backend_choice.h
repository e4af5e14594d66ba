// SPDX-License-Identifier: MIT
#pragma once
#include <memory>
#include <string>

#include "moewb/quant/batch_backend.h"

namespace moewb::gui {

// quantizeModel's backend for the GUI's device setting (the same choice `moewb quantize --device`
// makes): nullptr for the CPU, or when no GPU backend can be had; then `note` says why if the user asked
// for CUDA explicitly (shown as the job's first stage), and stays empty for auto.
std::unique_ptr<quant::BatchBackend> quantBackendForDevice(quant::ComputeDevice device, std::string* note);

}  // namespace moewb::gui

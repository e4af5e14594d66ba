// SPDX-License-Identifier: MIT
#pragma once
#include <memory>
#include <string>

#include "moewb/quant/batch_backend.h"
#include "quant_device_choice.h"

namespace moewb::cli {

// quantizeModel's backend for `--device`: the choice app::quantBackendForDevice makes (the GUI makes the
// same one). When cuda was asked for and cannot be had, one line on stderr says so ("moewb quantize: no
// CUDA device: quantizing on the CPU (why)") and the CPU runs; auto falls back silently. Never aborts.
std::unique_ptr<quant::BatchBackend> quantBackendFor(quant::ComputeDevice device, const std::string& command);

// Why no GPU backend can be made here ("" when one can): the build, the driver or the device.
using app::gpuUnavailableReason;

}  // namespace moewb::cli

// SPDX-License-Identifier: MIT
#pragma once
#include <memory>
#include <string>

#include "moewb/quant/batch_backend.h"

namespace moewb::app {

// The one choice of quantizeModel's backend for a device setting, shared by `moewb quantize --device`
// (app/cli/quant_device.h) and the GUI's device setting. It lives here, in moewb_app_support, because
// core cannot see CUDA: this library links moewb_gpu when the build has CUDA and names the reason when not.
//
// cpu gives nullptr. cuda and auto give the GPU backend when this build has CUDA and the machine a usable
// GPU; otherwise nullptr (the CPU runs) and, only when cuda was asked for explicitly, `note` says so:
// "no CUDA device: quantizing on the CPU (why)". auto falls back silently (empty note). Never aborts.
std::unique_ptr<quant::BatchBackend> quantBackendForDevice(quant::ComputeDevice device, std::string* note);

// Why no GPU backend can be made here ("" when one can): the build, the driver or the device.
std::string gpuUnavailableReason();

}  // namespace moewb::app

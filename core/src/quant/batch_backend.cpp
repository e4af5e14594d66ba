// SPDX-License-Identifier: MIT
#include "moewb/quant/batch_backend.h"

namespace moewb::quant {

std::string_view computeDeviceName(ComputeDevice d) {
  switch (d) {
    case ComputeDevice::Auto:
      return "auto";
    case ComputeDevice::Cpu:
      return "cpu";
    case ComputeDevice::Cuda:
      return "cuda";
  }
  return "?";
}

std::optional<ComputeDevice> parseComputeDevice(std::string_view s) {
  for (auto d : {ComputeDevice::Auto, ComputeDevice::Cpu, ComputeDevice::Cuda})
    if (s == computeDeviceName(d)) return d;
  return std::nullopt;
}

}  // namespace moewb::quant

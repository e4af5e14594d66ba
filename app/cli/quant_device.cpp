// SPDX-License-Identifier: MIT
#include "quant_device.h"

#include <cstdio>

namespace moewb::cli {

std::unique_ptr<quant::BatchBackend> quantBackendFor(quant::ComputeDevice device,
                                                     const std::string& command) {
  std::string note;
  std::unique_ptr<quant::BatchBackend> backend = app::quantBackendForDevice(device, &note);
  if (!note.empty()) std::fprintf(stderr, "moewb %s: %s\n", command.c_str(), note.c_str());
  return backend;
}

}  // namespace moewb::cli

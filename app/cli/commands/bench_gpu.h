// SPDX-License-Identifier: MIT
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace moewb::cli {

// Adds the GPU benchmarks `gemm` and `quantize` (with `quantize --synthetic MODEL`, the end-to-end
// quantization pipeline on a generated model) as subcommands of `parent`: `moewb bench gemm|quantize`
// and the older spelling `moewb bench-gpu gemm|quantize`. `command` names the parent in messages.
void addGpuBenchCommands(CLI::App& parent, const std::string& command);

}  // namespace moewb::cli

// SPDX-License-Identifier: MIT
#pragma once
// quantizeModel's GPU backend (quant::BatchBackend): HQQ and MiLo from quantize.h, one call per batch of
// same-shape matrices, device buffers and pinned host staging sized by the largest batch and reused.
// The pipeline around it (grouping, streaming, storage) is core's; see docs/gpu-quantization.md.
#include <memory>
#include <string>

#include "moewb/quant/batch_backend.h"

namespace moewb::gpu {

// nullptr, with the reason in `why`, when no usable CUDA device is present (never aborts).
std::unique_ptr<quant::BatchBackend> makeQuantBackend(std::string* why = nullptr);

}  // namespace moewb::gpu

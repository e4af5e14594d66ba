// SPDX-License-Identifier: MIT
#pragma once
// The routers of the supported families, shared by the CPU engine and the GPU engine (which computes the
// router logits on the device and routes with this same code, so both choose the same experts).
#include <cstdint>

#include "moewb/engine/model_config.h"

namespace moewb::engine {

// Chooses top_k experts for each of n tokens from the router logits [n, num_experts] (router bias already
// added) as the family's HF router does: chosen [n, top_k] best first, weights [n, top_k] (what the
// experts' outputs, or for Llama 4 their inputs, are multiplied by). score_bias: DeepSeek-V3's
// e_score_correction_bias, else nullptr. Runs on the worker threads.
void routeTokens(const ModelConfig& c, const float* logits, int64_t n, const float* score_bias,
                 int32_t* chosen, float* weights);

}  // namespace moewb::engine

// SPDX-License-Identifier: MIT
#pragma once
// What calibration-based methods (GPTQ, QMoE) receive per weight matrix: the Hessian of the layer-wise
// reconstruction loss, H = 2 X^T X, over the inputs X [tokens, in] the matrix saw in a forward pass
// through the engine (for a routed expert only the tokens routed to it). Collected by
// engine::HessianCollector (moewb/engine/calibration.h).
#include <Eigen/Dense>
#include <cstdint>
#include <map>
#include <string>

namespace moewb::quant {

struct MatrixHessian {
  int64_t cols = 0;         // the matrix's input features
  int64_t tokens = 0;       // rows of X accumulated into h
  int64_t tokens_seen = 0;  // rows offered; those beyond the collector's cap were not accumulated
  Eigen::MatrixXd h;        // [cols, cols], 2 X^T X in float64
};

// By matrix name (the catalog's: a tensor, or "TENSOR[e]" for expert e of a fused expert tensor). A
// matrix that received no token (an expert no calibration token was routed to) has no entry.
using CalibrationSet = std::map<std::string, MatrixHessian, std::less<>>;

}  // namespace moewb::quant

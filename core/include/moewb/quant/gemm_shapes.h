// SPDX-License-Identifier: MIT
#pragma once
// Weight shapes for the W3A16 GEMM benchmark (`moewb bench gemm`, the GUI's GPU benchmark panel): parsed
// from "NxK" text, or taken from the matrices of a loaded model. Nothing here needs CUDA: the CLI and
// the GUI choose shapes the same way whether or not the build can run them.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/tensor_filter.h"

namespace moewb::quant {

// A weight shape: n = out features (rows of W), k = in features (columns).
struct GemmShape {
  int64_t n = 0, k = 0;
};

// "14336x4096" (also "14336X4096", "14336×4096", spaces around the parts). Throws moewb::Error naming
// `option` and the text when it is not two positive integers.
GemmShape parseGemmShape(std::string_view text, std::string_view option);

// The benchmark's default shapes: Mixtral-8x7B's experts (14336x4096, 4096x14336) and DeepSeek-MoE's
// (1408x2048, 2048x1408). (gpu::GemmBenchOptions starts with the same; gpu/ builds without core.)
std::vector<GemmShape> defaultBenchGemmShapes();

// Whether the W3A16 kernels can hold a weight: 64-row strips and quantization groups of 64 along k.
// (gpu/include/moewb/gpu/int3_layout.h has the same rule as w3a16ShapeSupported; gpu/ builds without core.)
bool w3a16KernelTakes(const GemmShape& shape);

// One distinct shape among a model's matrices.
struct ModelGemmShape {
  GemmShape shape;
  int64_t matrices = 0;      // how many of the selected matrices have it
  std::string first_tensor;  // the first of them in the checkpoint (slices of fused tensors end in "[e]")
  // What they are, by block and projection in order of first appearance, with counts:
  // "expert gate ×32, expert up ×32".
  std::string kinds;
};

// The distinct shapes of the matrices `moewb quantize` compresses (quant::isQuantizable) that `filter`
// accepts, in checkpoint order of their first matrix. Throws moewb::Error when the filter looks at
// statistics (they are not computed here).
std::vector<ModelGemmShape> modelGemmShapes(const ModelCatalog& catalog, const TensorFilter& filter = {});

// "4096x14336: 32 matrices, expert down ×32 (model.layers.0.block_sparse_moe.experts.0.w2.weight)", one line.
std::string describeModelGemmShape(const ModelGemmShape& s);

}  // namespace moewb::quant

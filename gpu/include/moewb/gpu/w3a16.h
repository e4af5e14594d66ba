// SPDX-License-Identifier: MIT
#pragma once
// W3A16 GEMM: Y[m, n] = X[m, k] * dequant(W)[n, k]^T (+ (X V^T) U^T) for fp16 or bf16 activations and
// 3-bit weights in groups of 64 along k, on tensor cores (mma.sync m16n8k16), m = 1..64: the stream-K
// kernel (gpu/src/w3a16_streamk.cu). All pointers are device pointers; see docs/w3a16-kernel.md for the
// weight layout and the repack step.
#include <cstdint>

#include "moewb/gpu/device.h"
#include "moewb/gpu/int3_layout.h"

namespace moewb::gpu {

struct W3A16Weights {
  const void* packed = nullptr;  // kernel layout, int3Words(n, k) uint32, 16-byte aligned
  const void* scales = nullptr;  // groupCount(n, k), kernel layout, in `type`
  const void* bias = nullptr;    // -z*s, groupCount(n, k), kernel layout, in `type`; nullptr = symmetric (zero 4)
  int64_t n = 0, k = 0;
  // Type of the scales and biases, and of X and Y in every call with these weights (the repack writes
  // the scales in the activations' type, so that the decoder needs no conversion).
  W3A16Type type = W3A16Type::Fp16;
};

// Optional low-rank compensator (MiLo): Y += (X V^T) U^T, rank a multiple of 16, at most 128, stored as
// MiLo stores it, in INT3 (packInt3FactorToW3A16 builds the factors): U as an n x 64*ceil(rank/64) weight,
// V as a (64 or 128) x k weight, both symmetric, in the kernel layout and the weights' type. Runs inside
// the kernel: V is streamed with the weights, T = X V^T completed once, T U^T added while converting.
struct LowRankCompensator {
  int rank = 0;
  W3A16Weights u3, v3;
};

struct W3A16Config {
  int ctas = 0;  // CTAs of the call (0 = one wave of resident CTAs, w3a16Ctas); benchmarks and tests override it
};

// Bytes of scratch the call needs for a weight with n rows. The scratch must be zeroed once when it
// is allocated (cudaMemset); every call leaves it zeroed again, so a CUDA graph can replay the call.
// Calls sharing one scratch must not run concurrently.
int64_t w3a16WorkspaceBytes(int64_t n);

// x: [m, k] row-major (16-byte aligned rows: k % 8 == 0); y: [m, n] row-major; both in w.type.
Status w3a16Gemm(const void* x, const W3A16Weights& w, void* y, int64_t m, const LowRankCompensator* compensator,
                 void* workspace, int64_t workspace_bytes, Stream stream, const W3A16Config* config = nullptr);

// Dequantizes the kernel layout (fp16 scales) into fp16 [n, k] row-major (the dequantize+cuBLAS baseline
// and tests).
Status w3a16Dequantize(const W3A16Weights& w, void* out, Stream stream);

// The number of CTAs w3a16Gemm runs this call on (the benchmark's report).
int w3a16Ctas(int64_t m, int64_t n, int64_t k, const W3A16Config* config = nullptr);

}  // namespace moewb::gpu

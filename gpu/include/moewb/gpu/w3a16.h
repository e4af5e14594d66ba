// SPDX-License-Identifier: MIT
#pragma once
// W3A16 GEMM: Y[m, n] = X[m, k] * dequant(W)[n, k]^T (+ (X V^T) U^T) for fp16 activations and 3-bit
// weights in groups of 64 along k, on tensor cores (mma.sync m16n8k16), m = 1..64.
// All pointers are device pointers; see docs/w3a16-kernel.md for the weight layout and the repack step.
#include <cstdint>

#include "moewb/gpu/device.h"

namespace moewb::gpu {

struct W3A16Weights {
  const void* packed = nullptr;  // kernel layout, int3Words(n, k) uint32, 16-byte aligned
  const void* scales = nullptr;  // fp16, groupCount(n, k), kernel layout
  const void* bias = nullptr;    // fp16 -z*s, groupCount(n, k), kernel layout; nullptr = symmetric (zero 4)
  int64_t n = 0, k = 0;
};

// Optional low-rank compensator (MiLo): Y += (X V^T) U^T with fp16 U [n, rank] and V [rank, k],
// both row-major; rank a multiple of 16, at most 128. It runs as extra tensor-core k steps of the GEMM;
// X V^T is computed inside the GEMM's main loop for m <= 32 and rank <= 64, else by a small kernel first.
struct LowRankCompensator {
  const void* u = nullptr;
  const void* v = nullptr;
  int rank = 0;
};

struct W3A16Config {
  int split_k = 0;  // 0 = choose from the shape and the device (benchmarks override it)
  int stages = 0;   // cp.async pipeline depth of the pipelined kernel for m <= 16: 0 = default (4), or 6
  int kernel = 0;   // 0 = choose (pipelined; streaming for m = 9..32, k >= 8192, with a compensator), 1 = streaming
                    // (m <= 32, else pipelined), 2 = pipelined. See docs/w3a16-kernel.md.
  int overlap = 0;  // pipelined kernel on sm_90: 0 = programmatic dependent launch (the weight prologue
                    // overlaps the previous kernel in the stream), 2 = plain launch
};

// Bytes of scratch the call needs for a weight with n rows. The scratch must be zeroed once when it
// is allocated (cudaMemset); every call leaves it zeroed again, so a CUDA graph can replay the call.
// Calls sharing one scratch must not run concurrently.
int64_t w3a16WorkspaceBytes(int64_t n, int rank = 0);

// x: fp16 [m, k] row-major (16-byte aligned rows: k % 8 == 0); y: fp16 [m, n] row-major.
Status w3a16Gemm(const void* x, const W3A16Weights& w, void* y, int64_t m, const LowRankCompensator* compensator,
                 void* workspace, int64_t workspace_bytes, Stream stream, const W3A16Config* config = nullptr);

// Dequantizes the kernel layout into fp16 [n, k] row-major (the dequantize+cuBLAS baseline and tests).
Status w3a16Dequantize(const W3A16Weights& w, void* out, Stream stream);

// The split-k factor w3a16Gemm would choose (for the benchmark's report).
int w3a16ChooseSplitK(int64_t m, int64_t n, int64_t k);

}  // namespace moewb::gpu

// SPDX-License-Identifier: MIT
#pragma once
// W3A16 GEMM: Y[m, n] = X[m, k] * dequant(W)[n, k]^T (+ (X V^T) U^T) for fp16 or bf16 activations and
// 3-bit weights in groups of 64 along k, on tensor cores (mma.sync m16n8k16), m = 1..64.
// All pointers are device pointers; see docs/w3a16-kernel.md for the weight layout and the repack step.
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
  // the scales in the activations' type, so that the decoder needs no conversion). bf16 runs on the
  // stream-K kernel only.
  W3A16Type type = W3A16Type::Fp16;
};

// Optional low-rank compensator (MiLo): Y += (X V^T) U^T, rank a multiple of 16, at most 128, in one
// of two storages:
//  * INT3, as MiLo stores it (`u3`, `v3` set; packInt3FactorToW3A16 builds them): U as an n x 64*ceil(rank/64)
//    weight, V as a (64 or 128) x k weight, both symmetric in the kernel layout. Runs inside the stream-K
//    kernel: V is streamed with the weights, T = X V^T completed once, T U^T added while converting.
//  * fp16 U [n, rank] and V [rank, k] row-major (`u`, `v`): extra tensor-core k steps of the split-k
//    kernels (X V^T inside the main loop for m <= 32 and rank <= 64, else by a small kernel first); fp16
//    activations only.
struct LowRankCompensator {
  const void* u = nullptr;
  const void* v = nullptr;
  int rank = 0;
  W3A16Weights u3, v3;  // INT3 factors (packed != nullptr selects this storage); type = the weights' type
};

struct W3A16Config {
  int split_k = 0;  // 0 = choose from the shape and the device (benchmarks override it)
  int stages = 0;   // cp.async pipeline depth of the pipelined kernel for m <= 16: 0 = default (4), or 6
  int kernel = 0;   // 0 = choose (stream-K unless the compensator has fp16 U and V),
                    // 1 = streaming (m <= 32, else pipelined), 2 = pipelined split-k, 3 = stream-K (the
                    // split_k field then sets its number of CTAs). See docs/w3a16-kernel.md.
  int overlap = 0;  // pipelined kernel on sm_90: 0 = programmatic dependent launch (the weight prologue
                    // overlaps the previous kernel in the stream), 2 = plain launch
};

// Bytes of scratch the call needs for a weight with n rows. The scratch must be zeroed once when it
// is allocated (cudaMemset); every call leaves it zeroed again, so a CUDA graph can replay the call.
// Calls sharing one scratch must not run concurrently.
int64_t w3a16WorkspaceBytes(int64_t n, int rank = 0);

// x: [m, k] row-major (16-byte aligned rows: k % 8 == 0); y: [m, n] row-major; both in w.type.
Status w3a16Gemm(const void* x, const W3A16Weights& w, void* y, int64_t m, const LowRankCompensator* compensator,
                 void* workspace, int64_t workspace_bytes, Stream stream, const W3A16Config* config = nullptr);

// Dequantizes the kernel layout (fp16 scales) into fp16 [n, k] row-major (the dequantize+cuBLAS baseline
// and tests).
Status w3a16Dequantize(const W3A16Weights& w, void* out, Stream stream);

// The kernel w3a16Gemm would run for this call (W3A16Config::kernel numbering: 1 streaming, 2 pipelined
// split-k, 3 stream-K) and, in *work_split, its split-k factor or (stream-K) its number of CTAs.
int w3a16KernelFor(int64_t m, int64_t n, int64_t k, const W3A16Weights& w, const LowRankCompensator* compensator,
                   const W3A16Config* config, int* work_split);

}  // namespace moewb::gpu

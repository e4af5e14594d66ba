// SPDX-License-Identifier: MIT
#pragma once
// Internal interface of the stream-K W3A16 kernel (w3a16_streamk.cu), called by w3a16Gemm().
#include <cuda_runtime.h>

#include <cstdint>

#include "moewb/gpu/device.h"

namespace moewb::gpu::detail {

struct StreamKArgs {
  const void* x = nullptr;  // fp16 or bf16 [m][k]
  void* y = nullptr;        // same type, [m][n]
  bool bf16 = false;
  const void* w = nullptr;  // kernel layout (scales/biases in the activation type)
  const void* s = nullptr;
  const void* b = nullptr;  // nullptr = symmetric (zero 4)
  int m = 0, n = 0, k = 0;
  // Optional INT3 compensator (kernel layout, symmetric): V padded to v_rows (64 or 128) x k, U n x
  // 64*u_groups (rank columns, the rest zero codes).
  const void* vw = nullptr;
  const void* vs = nullptr;
  const void* uw = nullptr;
  const void* us = nullptr;
  int rank = 0;
  void* workspace = nullptr;  // streamKWorkspaceBytes(n), zero between calls
  bool overlap = true;        // programmatic dependent launch (sm_90)
  int grid = 0;               // 0 = choose (streamKCtas)
};

// Scratch layout: the pairs' sums [64][n] (fp32, or 64-bit counted words in fp16), fp32 T [64][128],
// counters (one per 128-row pair + 2).
int64_t streamKWorkspaceBytes(int64_t n);
Status launchW3A16StreamK(const StreamKArgs& a, cudaStream_t stream);
// The grid the kernel uses when not told: one wave of resident CTAs, at most one per work unit, with or
// without a compensator.
int streamKGrid(int64_t m, int64_t n, int64_t k);
// The grid of a call that asks for `requested` CTAs (0: streamKGrid), at most one per work unit.
int streamKCtas(int64_t m, int64_t n, int64_t k, int requested);

}  // namespace moewb::gpu::detail

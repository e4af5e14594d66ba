// SPDX-License-Identifier: MIT
#pragma once
// One launch path for the W3A16 kernels (private: includes CUDA headers): opt in to the dynamic shared
// memory a kernel needs (and the largest carveout, so that the planned CTAs fit on an SM), and launch
// it with programmatic dependent launch allowed or not.
#include <cuda_runtime.h>

#include "cuda_check.h"

namespace moewb::gpu::detail {

// Sets the attributes once per kernel (the caller keeps the once-flag: one per kernel instantiation).
template <typename Kernel>
cudaError_t allowSharedMemory(Kernel kernel, int bytes) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  return e;
}

// `overlap`: cudaLaunchAttributeProgrammaticStreamSerialization, so that the kernel's prologue (before its
// griddepcontrol.wait) may overlap the kernel before it in the stream.
template <typename Kernel, typename Params>
Status launchKernel(Kernel kernel, const Params& p, int grid, int threads, int smem_bytes, bool overlap, cudaStream_t stream) {
  cudaLaunchConfig_t launch{};
  launch.gridDim = dim3(unsigned(grid));
  launch.blockDim = dim3(unsigned(threads));
  launch.dynamicSmemBytes = size_t(smem_bytes);
  launch.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = overlap ? 1 : 0;
  launch.attrs = attr;
  launch.numAttrs = 1;
  MOEWB_CUDA_TRY(cudaLaunchKernelEx(&launch, kernel, p));
  return Status::success();
}

}  // namespace moewb::gpu::detail

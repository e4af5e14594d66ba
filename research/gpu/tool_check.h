// SPDX-License-Identifier: MIT
#pragma once
// The diagnostic tools' CUDA error check: name the failing call and exit 1. (Library code returns a
// Status instead: gpu/src/cuda_check.h.)
#include <cuda_runtime.h>
#include <errno.h>  // program_invocation_short_name (glibc)

#include <cstdio>
#include <cstdlib>

#define CK(call)                                                                                       \
  do {                                                                                                 \
    const cudaError_t ck_e_ = (call);                                                                  \
    if (ck_e_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "%s: %s failed: %s\n", program_invocation_short_name, #call, cudaGetErrorString(ck_e_)); \
      std::exit(1);                                                                                    \
    }                                                                                                  \
  } while (0)

// SPDX-License-Identifier: MIT
#pragma once
// Functions of the kernels' internal headers that the host (launchers, host-side tests) shares with the
// device: __host__ __device__ under nvcc, plain functions in a C++ compiler.
#if defined(__CUDACC__)
#define MOEWB_HOST_DEVICE __host__ __device__
#else
#define MOEWB_HOST_DEVICE
#endif

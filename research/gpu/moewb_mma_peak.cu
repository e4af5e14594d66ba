// SPDX-License-Identifier: MIT
// moewb_mma_peak: the throughput and latency of the tensor-core instruction the W3A16 kernels use,
// mma.sync.m16n8k16 with fp16 inputs and fp32 accumulators, on this GPU: warps that issue only
// independent chains of it (no loads), for 1..8 chains per warp and 4..32 warps per SM. Prints TFLOP/s
// and cycles per instruction per scheduler at the device's nominal clock, so that the kernels' issue
// rate of mma (docs/benchmarks.md, "What limits the GEMM") can be compared with what the pipe allows.
// A diagnostic tool: it exits 1 on any CUDA error.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "tool_check.h"

// CHAINS independent accumulators per warp, each advanced by one mma per iteration.
template <int CHAINS>
__global__ void mmaChains(float* sink, int iterations) {
  float c[CHAINS][4] = {};
  const unsigned a0 = threadIdx.x, a1 = a0 * 3, a2 = a0 * 5, a3 = a0 * 7, b0 = a0 ^ 0x3c003c00u, b1 = a0 | 0x3c00u;
  for (int it = 0; it < iterations; ++it) {
#pragma unroll
    for (int i = 0; i < CHAINS; ++i)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(c[i][0]), "+f"(c[i][1]), "+f"(c[i][2]), "+f"(c[i][3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  float s = 0.f;
  for (int i = 0; i < CHAINS; ++i) s += c[i][0] + c[i][1] + c[i][2] + c[i][3];
  if (s == 1234.5f) sink[threadIdx.x] = s;  // keeps the chains alive; never true in practice
}

template <int CHAINS>
void measure(int warps_per_cta, int ctas_per_sm) {
  int sms = 0, khz = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  float* sink = nullptr;
  CK(cudaMalloc(&sink, 1024 * sizeof(float)));
  const int grid = sms * ctas_per_sm, threads = warps_per_cta * 32, iterations = 4096;
  mmaChains<CHAINS><<<grid, threads>>>(sink, 16);  // warm-up
  CK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  CK(cudaEventRecord(start));
  mmaChains<CHAINS><<<grid, threads>>>(sink, iterations);
  CK(cudaEventRecord(stop));
  CK(cudaEventSynchronize(stop));
  float ms = 0.f;
  CK(cudaEventElapsedTime(&ms, start, stop));
  const double per_scheduler = double(ctas_per_sm) * warps_per_cta * CHAINS * iterations / 4.0;
  const double tflops = double(grid) * warps_per_cta * CHAINS * iterations * 4096.0 / (ms * 1e-3) / 1e12;
  std::printf("| %d | %d | %d | %.0f | %.2f |\n", CHAINS, warps_per_cta * ctas_per_sm, warps_per_cta * ctas_per_sm / 4, tflops,
              ms * 1e-3 * khz * 1e3 / per_scheduler);
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(stop));
  CK(cudaFree(sink));
}

int main() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  int khz = 0;
  CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  std::printf("%s, %d SMs, nominal clock %d MHz; mma.sync.m16n8k16 f16 x f16 -> f32\n\n", prop.name, prop.multiProcessorCount,
              khz / 1000);
  std::printf("| chains per warp | warps per SM | warps per scheduler | TFLOP/s | cycles per mma per scheduler |\n");
  std::printf("|---|---|---|---|---|\n");
  measure<1>(4, 1);
  measure<2>(4, 1);
  measure<4>(4, 1);
  measure<4>(8, 1);
  measure<8>(8, 1);
  measure<4>(16, 1);
  measure<8>(16, 2);
  return 0;
}

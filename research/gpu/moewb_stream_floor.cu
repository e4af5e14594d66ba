// SPDX-License-Identifier: MIT
// moewb_stream_floor: how fast can any kernel read the 25.7 MB of one 4096x14336 W3A16 weight (3-bit
// codes + fp16 scales and biases) in a CUDA graph of back-to-back calls over rotating buffers (the
// timing method of `moewb bench gemm`)? It times plain streaming kernels that only read: 16-byte
// register loads (U per thread in flight) and cp.async rings (U x 16 bytes per thread per stage, S
// stages), with 1..8 CTAs per SM, with and without programmatic dependent launch. The best of them is
// the floor the W3A16 kernels are measured against in docs/benchmarks.md ("What limits the GEMM").
// A diagnostic tool: it prints a table and exits 1 on any CUDA error.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>

#include "tool_check.h"

// Programmatic dependent launch (sm_90): wait for the previous kernel, then let the next one start.
__device__ __forceinline__ void waitPreviousReleaseNext() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ uint4 ldnc(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}

// Each CTA streams a contiguous chunk; each thread issues U loads per round.
template <int U, bool PDL>
__global__ void regStream(const uint4* __restrict__ buf, size_t n16, unsigned* out) {
  const size_t per = (n16 + gridDim.x - 1) / gridDim.x;
  const size_t b = blockIdx.x * per, e = min(n16, b + per);
  unsigned acc = 0;
  size_t i = b + threadIdx.x;
  bool first = true;
  for (; i + (U - 1) * blockDim.x < e; i += U * blockDim.x) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = ldnc(buf + i + u * blockDim.x);
    if (PDL && first) {
      waitPreviousReleaseNext();
      first = false;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < e; i += blockDim.x) { uint4 v = ldnc(buf + i); acc ^= v.x ^ v.w; }
  if (PDL && first) waitPreviousReleaseNext();
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}

// cp.async ring: each thread copies U x 16 B per stage into shared memory, S stages.
template <int U, int S, bool PDL>
__global__ void asyncStream(const uint4* __restrict__ buf, size_t n16, unsigned* out) {
  extern __shared__ uint4 sm[];
  const size_t per = (n16 + gridDim.x - 1) / gridDim.x;
  const size_t b = blockIdx.x * per, e = min(n16, b + per);
  const int stage = U * blockDim.x;
  const int iters = int((e - b + stage - 1) / stage);
  unsigned acc = 0;
  auto issue = [&](int it) {
    if (it < iters) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        size_t idx = b + size_t(it) * stage + u * blockDim.x + threadIdx.x;
        unsigned dst = (unsigned)__cvta_generic_to_shared(sm + (it % S) * stage + u * blockDim.x + threadIdx.x);
        int bytes = idx < e ? 16 : 0;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(buf + (idx < e ? idx : b)), "r"(bytes));
      }
    }
    asm volatile("cp.async.commit_group;");
  };
  for (int s = 0; s < S - 1; ++s) issue(s);
  if (PDL) waitPreviousReleaseNext();
  for (int it = 0; it < iters; ++it) {
    asm volatile("cp.async.wait_group %0;" ::"n"(S - 2));
    __syncthreads();
    issue(it + S - 1);
#pragma unroll
    for (int u = 0; u < U; ++u) { uint4 v = sm[(it % S) * stage + u * blockDim.x + threadIdx.x]; acc ^= v.x ^ v.w; }
  }
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}

template <typename K>
float timeIt(K kernel, int grid, int block, int smem, bool pdl, std::vector<uint4*>& bufs, size_t n16, unsigned* out) {
  cudaStream_t st; CK(cudaStreamCreate(&st));
  if (smem > 48 * 1024) CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  auto launch = [&](int i) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid; cfg.blockDim = block; cfg.dynamicSmemBytes = smem; cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at; cfg.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, kernel, (const uint4*)bufs[i % bufs.size()], n16, out));
  };
  const int calls = 40;
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < calls; ++i) launch(i);
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, z; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&z));
  for (int w = 0; w < 3; ++w) CK(cudaGraphLaunch(ge, st));
  std::vector<float> ts;
  for (int r = 0; r < 25; ++r) {
    CK(cudaEventRecord(a, st)); CK(cudaGraphLaunch(ge, st)); CK(cudaEventRecord(z, st)); CK(cudaEventSynchronize(z));
    float ms; CK(cudaEventElapsedTime(&ms, a, z)); ts.push_back(ms * 1000.f / calls);
  }
  std::sort(ts.begin(), ts.end());
  CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g)); CK(cudaStreamDestroy(st));
  return ts[ts.size() / 2];
}

int main() {
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t bytes = 4096ull * 14336 * 3 / 8 + 4096ull * 14336 / 64 * 4;  // weights + scales + biases
  const size_t n16 = bytes / 16;
  std::vector<uint4*> bufs(6);
  for (auto& b : bufs) { CK(cudaMalloc(&b, bytes)); CK(cudaMemset(b, 0x5a, bytes)); }
  unsigned* out; CK(cudaMalloc(&out, 1 << 20));
  printf("bytes %.2f MB, SMs %d, floor at 3.0 TB/s %.2f us\n", bytes / 1e6, sms, bytes / 3.0e6);
  for (int pdl = 0; pdl < 2; ++pdl) {
    for (int per : {1, 2, 4, 8}) for (int blk : {256, 512}) {
      if (per * blk > 2048) continue;
      float t2 = pdl ? timeIt(regStream<2, true>, sms * per, blk, 0, true, bufs, n16, out) : timeIt(regStream<2, false>, sms * per, blk, 0, false, bufs, n16, out);
      float t4 = pdl ? timeIt(regStream<4, true>, sms * per, blk, 0, true, bufs, n16, out) : timeIt(regStream<4, false>, sms * per, blk, 0, false, bufs, n16, out);
      float t8 = pdl ? timeIt(regStream<8, true>, sms * per, blk, 0, true, bufs, n16, out) : timeIt(regStream<8, false>, sms * per, blk, 0, false, bufs, n16, out);
      printf("reg pdl=%d ctas/SM=%d block=%d: U2 %.2f U4 %.2f U8 %.2f us  (%.0f GB/s best)\n", pdl, per, blk, t2, t4, t8,
             bytes / 1e3 / std::min(t2, std::min(t4, t8)));
    }
    for (int per : {1, 2, 4}) {
      float a = pdl ? timeIt(asyncStream<2, 4, true>, sms * per, 256, 2 * 4 * 256 * 16, true, bufs, n16, out) : timeIt(asyncStream<2, 4, false>, sms * per, 256, 2 * 4 * 256 * 16, false, bufs, n16, out);
      float c = pdl ? timeIt(asyncStream<3, 6, true>, sms * per, 256, 3 * 6 * 256 * 16, true, bufs, n16, out) : timeIt(asyncStream<3, 6, false>, sms * per, 256, 3 * 6 * 256 * 16, false, bufs, n16, out);
      float d = pdl ? timeIt(asyncStream<4, 4, true>, sms * per, 256, 4 * 4 * 256 * 16, true, bufs, n16, out) : timeIt(asyncStream<4, 4, false>, sms * per, 256, 4 * 4 * 256 * 16, false, bufs, n16, out);
      printf("async pdl=%d ctas/SM=%d block=256: U2S4 %.2f U3S6 %.2f U4S4 %.2f us\n", pdl, per, a, c, d);
    }
  }
  CK(cudaGetLastError());
  return 0;
}

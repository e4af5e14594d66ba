// SPDX-License-Identifier: MIT
// W3A16 GEMM: the one host entry point, w3a16Gemm(), which checks a call and runs it on the stream-K
// kernel (w3a16_streamk.cu; design notes and measurements: docs/w3a16-kernel.md), and the dequantize
// kernel of the dequantize + cuBLAS baseline, w3a16Dequantize().
#include <cuda_fp16.h>

#include <mutex>
#include <string>

#include "cuda_check.h"
#include "moewb/gpu/int3_layout.h"
#include "moewb/gpu/w3a16.h"
#include "w3a16_device.cuh"
#include "w3a16_streamk.h"

namespace moewb::gpu {
namespace {

using namespace w3a16dev;

constexpr int kMaxM = 64;
constexpr int kMaxRank = 128;

// One thread per (block, lane): the same decoder as the GEMM, written out as fp16 [n][k].
template <bool kAsym>
__global__ void w3a16DequantKernel(const uint4* w, const uint4* s, const uint4* bias, half* out, int n, int k) {
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int groups = k / 64;
  const int64_t block = tid / 32;
  if (block >= int64_t(n / 64) * groups) return;
  const int lane = int(tid % 32), g = lane / 4, t = lane % 4;
  const int strip = int(block / groups), gi = int(block % groups);
  uint32_t wd[12];
  laneWords(w + block * kBlockU4, lane, wd);
  const uint4 sv = s[block * kScaleU4 + g];
  const half* sh = reinterpret_cast<const half*>(&sv);
  uint4 bv{};
  if constexpr (kAsym) bv = bias[block * kScaleU4 + g];
  const half* bh = reinterpret_cast<const half*>(&bv);
#pragma unroll
  for (int rt = 0; rt < 4; ++rt)
#pragma unroll
    for (int pp = 0; pp < 16; ++pp) {
      const int sidx = 2 * rt + (pp & 1);
      const half b = kAsym ? bh[sidx] : __hmul(__float2half(-4.0f), sh[sidx]);
      const half2 q = decodePair<half>(pp, wd[3 * rt], wd[3 * rt + 1], wd[3 * rt + 2]);
      const half2 val = __hfma2(q, __half2half2(sh[sidx]), __half2half2(b));
      const int row = strip * 64 + rt * 16 + g + 8 * (pp & 1);
      const int col = gi * 64 + (pp / 4) * 16 + 2 * t + 8 * ((pp >> 1) & 1);
      *reinterpret_cast<half2*>(out + size_t(row) * k + col) = val;
    }
}

// Programmatic dependent launch (sm_90 and later): the kernel's weight prologue may overlap the tail of the
// kernel before it in the stream; X and the scratch are touched only after that kernel completed.
bool dependentLaunch() {
  static std::once_flag once;
  static bool allowed = false;
  std::call_once(once, [] {
    int dev = 0, major = 0;
    allowed = cudaGetDevice(&dev) == cudaSuccess &&
              cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9;
  });
  return allowed;
}

}  // namespace

int64_t w3a16WorkspaceBytes(int64_t n) { return detail::streamKWorkspaceBytes(n); }

int w3a16Ctas(int64_t m, int64_t n, int64_t k, const W3A16Config* config) {
  return detail::streamKCtas(m, n, k, config ? config->ctas : 0);
}

Status w3a16Gemm(const void* x, const W3A16Weights& w, void* y, int64_t m, const LowRankCompensator* comp,
                 void* workspace, int64_t workspace_bytes, Stream stream, const W3A16Config* config) {
  if (!w3a16ShapeSupported(w.n, w.k))
    return Status::failure(-1, "w3a16Gemm: n and k must be positive multiples of 64 (n=" + std::to_string(w.n) +
                                   ", k=" + std::to_string(w.k) + ")");
  if (m < 1 || m > kMaxM) return Status::failure(-1, "w3a16Gemm: batch m must be 1..64, got " + std::to_string(m));
  const int rank = comp ? comp->rank : 0;
  if (rank < 0 || rank > kMaxRank || rank % 16)
    return Status::failure(-1, "w3a16Gemm: compensator rank must be a multiple of 16 up to 128, got " + std::to_string(rank));
  if (workspace_bytes < w3a16WorkspaceBytes(w.n))
    return Status::failure(-1, "w3a16Gemm: workspace of " + std::to_string(workspace_bytes) + " bytes, need " +
                                   std::to_string(w3a16WorkspaceBytes(w.n)));
  if (!x || !w.packed || !w.scales || !y || !workspace) return Status::failure(-1, "w3a16Gemm: null pointer");
  detail::StreamKArgs a;
  a.x = x;
  a.y = y;
  a.bf16 = w.type == W3A16Type::Bf16;
  a.w = w.packed;
  a.s = w.scales;
  a.b = w.bias;
  a.m = int(m);
  a.n = int(w.n);
  a.k = int(w.k);
  if (rank > 0) {
    const int64_t v_rows = rank <= 64 ? 64 : 128, u_cols = (rank + 63) / 64 * 64;
    const W3A16Weights &u = comp->u3, &v = comp->v3;
    if (!u.packed || !u.scales || !v.packed || !v.scales)
      return Status::failure(-1, "w3a16Gemm: the compensator needs its INT3 factors (u3, v3)");
    if (v.n != v_rows || v.k != w.k || u.n != w.n || u.k != u_cols || u.bias || v.bias || u.type != w.type || v.type != w.type)
      return Status::failure(-1, "w3a16Gemm: INT3 compensator of rank " + std::to_string(rank) + " needs V as a symmetric " +
                                     std::to_string(v_rows) + "x" + std::to_string(w.k) + " and U as a symmetric " +
                                     std::to_string(w.n) + "x" + std::to_string(u_cols) +
                                     " kernel-layout weight in the weights' type; got V " + std::to_string(v.n) + "x" +
                                     std::to_string(v.k) + ", U " + std::to_string(u.n) + "x" + std::to_string(u.k));
    a.vw = v.packed;
    a.vs = v.scales;
    a.uw = u.packed;
    a.us = u.scales;
    a.rank = rank;
  }
  a.workspace = workspace;
  a.overlap = dependentLaunch();
  a.grid = config && config->ctas > 0 ? config->ctas : 0;
  return detail::launchW3A16StreamK(a, detail::toCuda(stream));
}

Status w3a16Dequantize(const W3A16Weights& w, void* out, Stream stream) {
  if (!w3a16ShapeSupported(w.n, w.k)) return Status::failure(-1, "w3a16Dequantize: unsupported shape");
  const int64_t threads = w.n * w.k / 4096 * 32;
  const int grid = int((threads + 255) / 256);
  const cudaStream_t st = detail::toCuda(stream);
  if (w.bias)
    w3a16DequantKernel<true><<<grid, 256, 0, st>>>(static_cast<const uint4*>(w.packed), static_cast<const uint4*>(w.scales),
                                                   static_cast<const uint4*>(w.bias), static_cast<half*>(out), int(w.n), int(w.k));
  else
    w3a16DequantKernel<false><<<grid, 256, 0, st>>>(static_cast<const uint4*>(w.packed), static_cast<const uint4*>(w.scales),
                                                    nullptr, static_cast<half*>(out), int(w.n), int(w.k));
  MOEWB_CUDA_TRY(cudaGetLastError());
  return Status::success();
}

}  // namespace moewb::gpu

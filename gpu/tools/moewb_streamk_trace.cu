// SPDX-License-Identifier: MIT
// Timeline of one stream-K W3A16 call (docs/benchmarks.md, "What limits the GEMM"): every CTA stamps the
// GPU's global timer when it starts, when each iteration's stage is ready, when its loop ends and when it
// ends; the tool prints the spread of each over the CTAs of the last of 40 back-to-back calls.
//   moewb_streamk_trace [n k m overlap rank]     (default 4096 14336 1 1 0; rank > 0: INT3 compensator)
// MOEWB_TRACE_STEADY=1: the last call is not preceded by a synchronisation (the steady state of graph replays).
// With MOEWB_TRACE_PER_CTA=1 it also prints one line per CTA: its SM, iterations, flushes and times, and
// with MOEWB_TRACE_ITERS=1 as well the times of each of its iterations' barriers. MOEWB_TRACE_CLUSTERS=1
// first prints how many thread-block clusters of the kernel can be resident at once.
// It compiles the kernel source itself with the timestamps switched on (STREAMK_TRACE), so the library's
// kernel carries none. The weights are random bytes: only the timing is of interest here.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

constexpr int kMaxCtas = 1024, kPoints = 48;
__device__ unsigned long long g_trace[kMaxCtas][kPoints];
__device__ int g_finished[kMaxCtas];  // finishing passes of each CTA (point 7)
__device__ int g_flushes[kMaxCtas];   // flushes of each CTA (point 4)
__device__ int g_smid[kMaxCtas];      // the SM each CTA ran on (point 0)
#define STREAMK_TRACE_BY(point, thread)                                             \
  do {                                                                              \
    if (threadIdx.x == (thread) && blockIdx.x < kMaxCtas && (point) < kPoints) {    \
      unsigned long long t_;                                                        \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                        \
      g_trace[blockIdx.x][(point)] = t_;                                            \
      if ((point) == 7) ++g_finished[blockIdx.x];                                   \
      if ((point) == 4) ++g_flushes[blockIdx.x];                                    \
      if ((point) == 0) asm volatile("mov.u32 %0, %%smid;" : "=r"(g_smid[blockIdx.x])); \
    }                                                                               \
  } while (0)
#define STREAMK_TRACE(point) STREAMK_TRACE_BY(point, 0)
#include "w3a16_streamk.cu"
#include "tool_check.h"

// How many clusters of 1, 2, 4, 8 and 16 CTAs of the kernel for batch m's tile size (fp16, asymmetric, no
// compensator; at m = 1 the general variant, whose resources are those of the m = 1 one) can be resident at
// once: whether all the CTAs that share a pair could form one cluster and add their sums in distributed
// shared memory instead of through L2 (docs/benchmarks.md, round 23).
template <int NT>
void printClusterOccupancy(int m, int grid) {
  using namespace moewb::gpu::detail;
  auto kernel = w3a16StreamKKernel<half, NT, true, false, false, false, false>;
  const int smem = smemBytes(NT, false, 0);
  CK(allowSharedMemory(kernel, smem));
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  std::printf("m = %d: %d CTAs of %d bytes of shared memory; resident clusters of", m, grid, smem);
  for (int size : {1, 2, 4, 8, 16}) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(unsigned(size * 64));
    config.blockDim = dim3(unsigned(kThreads));
    config.dynamicSmemBytes = size_t(smem);
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = unsigned(size);
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
    int clusters = 0;
    CK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
    std::printf(" %d: %d (%d CTAs)%s", size, clusters, clusters * size, size < 16 ? "," : "\n");
  }
}

int main(int argc, char** argv) {
  using namespace moewb::gpu::detail;
  const int n = argc > 1 ? std::atoi(argv[1]) : 4096, k = argc > 2 ? std::atoi(argv[2]) : 14336;
  const int m = argc > 3 ? std::atoi(argv[3]) : 1, overlap = argc > 4 ? std::atoi(argv[4]) : 1;
  const int rank = argc > 5 ? std::atoi(argv[5]) : 0;
  if (n <= 0 || k <= 0 || n % 64 || k % 64 || m < 1 || m > 64 || rank < 0 || rank > 128) {
    std::fprintf(stderr, "usage: %s [n k m overlap rank]: n, k multiples of 64, m = 1..64, rank 0..128\n", argv[0]);
    return 2;
  }
  const size_t wbytes = size_t(n) * k * 3 / 8, sbytes = size_t(n) * (k / 64) * 2;
  std::vector<unsigned char> hw(wbytes);
  for (auto& v : hw) v = static_cast<unsigned char>(std::rand());
  std::vector<__half> hs(sbytes / 2), hx(size_t(m) * k);
  for (auto& v : hs) v = __float2half(1e-4f * float(std::rand() % 100));
  for (auto& v : hx) v = __float2half(0.01f * float(std::rand() % 200 - 100));
  constexpr int kCopies = 6;  // rotate weights so that they come from HBM, not L2
  void *w[kCopies], *s[kCopies], *x, *y, *ws;
  for (int i = 0; i < kCopies; ++i) {
    CK(cudaMalloc(&w[i], wbytes));
    CK(cudaMalloc(&s[i], sbytes));
    CK(cudaMemcpy(w[i], hw.data(), wbytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(s[i], hs.data(), sbytes, cudaMemcpyHostToDevice));
  }
  CK(cudaMalloc(&x, hx.size() * 2));
  CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&y, size_t(m) * n * 2));
  const size_t ws_bytes = size_t(streamKWorkspaceBytes(n));
  CK(cudaMalloc(&ws, ws_bytes));
  CK(cudaMemset(ws, 0, ws_bytes));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  StreamKArgs a;
  a.x = x;
  a.y = y;
  a.m = m;
  a.n = n;
  a.k = k;
  a.workspace = ws;
  a.overlap = overlap != 0;
  if (rank > 0) {  // U and V in the kernel layout, random codes: V padded to 64 or 128 rows, U to 64-column groups
    const int v_rows = rank <= 64 ? 64 : 128, u_cols = (rank + 63) / 64 * 64;
    auto randomBuffer = [&](size_t bytes, bool halves) {
      std::vector<unsigned char> h(bytes);
      for (size_t i = 0; i < bytes; i += halves ? 2 : 1) {
        if (!halves) {
          h[i] = static_cast<unsigned char>(std::rand());
          continue;
        }
        const __half v = __float2half(1e-3f * float(std::rand() % 100));
        std::memcpy(&h[i], &v, 2);
      }
      void* d = nullptr;
      CK(cudaMalloc(&d, bytes));
      CK(cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice));
      return d;
    };
    a.vw = randomBuffer(size_t(v_rows) * k * 3 / 8, false);
    a.vs = randomBuffer(size_t(v_rows) * (k / 64) * 2, true);
    a.uw = randomBuffer(size_t(n) * u_cols * 3 / 8, false);
    a.us = randomBuffer(size_t(n) * (u_cols / 64) * 2, true);
    a.rank = rank;
  }
  const int grid = streamKGrid(m, n, k);
  if (grid > kMaxCtas) {
    std::fprintf(stderr, "grid of %d CTAs: more than the %d this tool records\n", grid, kMaxCtas);
    return 1;
  }
  if (std::getenv("MOEWB_TRACE_CLUSTERS")) {
    switch (tilesFor(m)) {
      case 1: printClusterOccupancy<1>(m, grid); break;
      case 2: printClusterOccupancy<2>(m, grid); break;
      case 4: printClusterOccupancy<4>(m, grid); break;
      default: printClusterOccupancy<8>(m, grid); break;
    }
  }
  // MOEWB_TRACE_STEADY=1: no synchronisation before the last call, which then overlaps the one before it as in
  // graph replays (its CTAs overwrite every stamp but those of points 1 and 4-7, which may be the earlier
  // call's; the counts of flushes and finishing passes are then those of all 40 calls).
  const bool steady = std::getenv("MOEWB_TRACE_STEADY") != nullptr;
  for (int call = 0; call < 40; ++call) {
    if (call == 39 && !steady) {  // points 1 and 4-7 and the counts are not stamped by every CTA: clear what earlier calls left
      CK(cudaStreamSynchronize(stream));
      static unsigned long long zeros[kMaxCtas][kPoints];
      static int no_pairs[kMaxCtas];
      CK(cudaMemcpyToSymbol(g_trace, zeros, sizeof(zeros)));
      CK(cudaMemcpyToSymbol(g_finished, no_pairs, sizeof(no_pairs)));
      CK(cudaMemcpyToSymbol(g_flushes, no_pairs, sizeof(no_pairs)));
    }
    a.w = w[call % kCopies];
    a.s = s[call % kCopies];
    a.b = s[(call + 1) % kCopies];  // any fp16 values will do as biases
    if (const auto st = launchW3A16StreamK(a, stream); !st.ok()) {
      std::fprintf(stderr, "launch failed: %s\n", st.message.c_str());
      return 1;
    }
  }
  CK(cudaStreamSynchronize(stream));
  static unsigned long long tr[kMaxCtas][kPoints];
  static int finished[kMaxCtas];
  CK(cudaMemcpyFromSymbol(tr, g_trace, sizeof(tr)));
  CK(cudaMemcpyFromSymbol(finished, g_finished, sizeof(finished)));
  static int flushes[kMaxCtas], smid[kMaxCtas];
  CK(cudaMemcpyFromSymbol(flushes, g_flushes, sizeof(flushes)));
  CK(cudaMemcpyFromSymbol(smid, g_smid, sizeof(smid)));
  unsigned long long t0 = ~0ull, t_end = 0;
  for (int c = 0; c < grid; ++c) {
    t0 = std::min(t0, tr[c][0]);
    t_end = std::max(t_end, tr[c][3]);
  }
  std::printf("%d x %d, m = %d, rank %d, %d CTAs, PDL %s%s: first start to last end %.2f us\n", n, k, m, rank, grid,
              overlap ? "on" : "off", steady ? ", steady (counts over 40 calls)" : "", double(t_end - t0) / 1e3);
  auto spread = [&](const std::string& name, auto us_of_cta) {
    std::vector<double> v;
    for (int c = 0; c < grid; ++c) v.push_back(us_of_cta(c));
    std::sort(v.begin(), v.end());
    std::printf("%-36s min %6.2f  p10 %6.2f  median %6.2f  p90 %6.2f  max %6.2f us\n", name.c_str(), v.front(),
                v[v.size() / 10], v[v.size() / 2], v[v.size() * 9 / 10], v.back());
  };
  auto us = [](unsigned long long a, unsigned long long b) { return double(b - a) / 1e3; };
  constexpr int it0 = kTraceIter;
  spread("first stage ready (from first start)", [&](int c) { return us(t0, tr[c][it0]); });
  spread("loop (first stage .. loop end)", [&](int c) { return us(tr[c][it0], tr[c][2]); });
  spread("last flush (its start .. loop end)", [&](int c) { return us(tr[c][4], tr[c][2]); });
  spread("arrival (loop end .. counters read)", [&](int c) { return us(tr[c][2], tr[c][6]); });
  spread("finishing (counters read .. end)", [&](int c) { return us(tr[c][6], tr[c][3]); });
  spread("sums and finishing (loop end .. end)", [&](int c) { return us(tr[c][2], tr[c][3]); });
  spread("end (from first start)", [&](int c) { return us(t0, tr[c][3]); });
  // The CTAs the call waits for: each one's timeline (us from the first start).
  std::vector<int> order(grid);
  for (int c = 0; c < grid; ++c) order[c] = c;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return tr[a][3] > tr[b][3]; });
  std::printf("last CTAs: start, first stage, last flush, sums sent, loop end, counters read, last finishing start, "
              "end; finishing passes; compensator: arrivals made, T staged, speculative T U^T done\n");
  for (int i = 0; i < std::min(grid, 6); ++i) {
    const int c = order[i];
    auto at = [&](int pt) { return tr[c][pt] ? us(t0, tr[c][pt]) : -1.0; };
    std::printf("  CTA %3d: %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f; %d; %6.2f %6.2f %6.2f\n", c, at(0),
                at(it0), at(4), at(5), at(2), at(6), at(7), at(3), finished[c], at(9), at(1), at(8));
  }
  std::printf("median time of iteration i's barrier (from the first start):");
  for (int it = 0; it < kPoints - it0; ++it) {
    std::vector<double> v;
    for (int c = 0; c < grid; ++c)
      if (tr[c][it0 + it] >= t0 && tr[c][it0 + it] <= t_end) v.push_back(us(t0, tr[c][it0 + it]));
    if (v.size() < size_t(grid) / 2) break;  // most CTAs have fewer iterations
    std::sort(v.begin(), v.end());
    std::printf(" %.2f", v[v.size() / 2]);
  }
  std::printf("\n");
  // MOEWB_TRACE_PER_CTA=1: one line per CTA, for correlating its times with its work and its SM.
  if (std::getenv("MOEWB_TRACE_PER_CTA")) {
    const bool iteration_times = std::getenv("MOEWB_TRACE_ITERS") != nullptr;
    std::printf("cta sm iterations flushes finishing_passes first_stage loop_end end%s (us from the first start)\n",
                iteration_times ? " barrier_of_each_iteration" : "");
    for (int c = 0; c < grid; ++c) {
      int iters = 0;
      while (iters < kPoints - it0 && tr[c][it0 + iters] >= t0 && tr[c][it0 + iters] <= t_end) ++iters;
      std::printf("%d %d %d %d %d %.2f %.2f %.2f", c, smid[c], iters, flushes[c], finished[c],
                  us(t0, tr[c][it0]), us(t0, tr[c][2]), us(t0, tr[c][3]));
      if (iteration_times)
        for (int it = 0; it < iters; ++it) std::printf(" %.2f", us(t0, tr[c][it0 + it]));
      std::printf("\n");
    }
  }
  return 0;
}

// SPDX-License-Identifier: MIT
// Benchmarks of the W3A16 GEMM and the GPU quantizers (see bench.h for the method).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

#include "cuda_check.h"
#include "moewb/gpu/bench.h"
#include "moewb/gpu/int3_layout.h"
#include "moewb/gpu/quantize.h"
#include "moewb/gpu/w3a16.h"

namespace moewb::gpu {
namespace {

struct DevMem {
  void* p = nullptr;
  DevMem() = default;
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  ~DevMem() {
    if (p) cudaFree(p);
  }
  Status alloc(size_t bytes) {
    MOEWB_CUDA_TRY(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
    return Status::success();
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

struct Events {
  cudaEvent_t a = nullptr, b = nullptr;
  ~Events() {
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
  }
};

// A CUDA graph of `calls` enqueue(i) calls (i = 0, 1, ...), instantiated.
struct CapturedGraph {
  cudaGraphExec_t exec = nullptr;
  CapturedGraph() = default;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() {
    if (exec) cudaGraphExecDestroy(exec);
  }
  Status capture(const std::function<Status(int, cudaStream_t)>& enqueue, int calls, cudaStream_t st) {
    cudaGraph_t graph = nullptr;
    MOEWB_CUDA_TRY(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    Status inner;
    for (int i = 0; i < calls && inner.ok(); ++i) inner = enqueue(i, st);
    const cudaError_t end = cudaStreamEndCapture(st, &graph);
    if (!inner.ok()) {
      if (graph) cudaGraphDestroy(graph);
      return inner;
    }
    MOEWB_CUDA_TRY(end);
    std::unique_ptr<CUgraph_st, decltype(&cudaGraphDestroy)> graph_guard(graph, cudaGraphDestroy);
    MOEWB_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));
    return Status::success();
  }
};

// Each call's steady-state time (GraphTiming, bench.h): a graph of `short_calls` calls and a longer one,
// each replayed twice to warm up, then `replays` rounds of one timed replay of each under events.
Status timeCalls(const std::function<Status(int, cudaStream_t)>& enqueue, int short_calls, int replays, cudaStream_t st,
                 GraphTiming* timing) {
  // At least 80 calls more: 20 and 100 for a Mixtral expert. Small matrices rotate among thousands of
  // buffers, whose short graph already spreads the fixed cost thin: twice as many calls there.
  const int long_calls = short_calls + std::max(80, short_calls);
  CapturedGraph short_graph, long_graph;
  MOEWB_STATUS_TRY(short_graph.capture(enqueue, short_calls, st));
  MOEWB_STATUS_TRY(long_graph.capture(enqueue, long_calls, st));
  for (int w = 0; w < 2; ++w) {
    MOEWB_CUDA_TRY(cudaGraphLaunch(short_graph.exec, st));
    MOEWB_CUDA_TRY(cudaGraphLaunch(long_graph.exec, st));
  }
  Events ev;
  MOEWB_CUDA_TRY(cudaEventCreate(&ev.a));
  MOEWB_CUDA_TRY(cudaEventCreate(&ev.b));
  auto replayUs = [&](cudaGraphExec_t exec, std::vector<double>& times) -> Status {
    MOEWB_CUDA_TRY(cudaEventRecord(ev.a, st));
    MOEWB_CUDA_TRY(cudaGraphLaunch(exec, st));
    MOEWB_CUDA_TRY(cudaEventRecord(ev.b, st));
    MOEWB_CUDA_TRY(cudaEventSynchronize(ev.b));
    float ms = 0;
    MOEWB_CUDA_TRY(cudaEventElapsedTime(&ms, ev.a, ev.b));
    times.push_back(double(ms) * 1000.0);
    return Status::success();
  };
  std::vector<double> short_us, long_us;
  for (int r = 0; r < replays; ++r) {
    MOEWB_STATUS_TRY(replayUs(short_graph.exec, short_us));
    MOEWB_STATUS_TRY(replayUs(long_graph.exec, long_us));
  }
  *timing = graphTimingFromReplays(short_us, long_us, short_calls, long_calls);
  return Status::success();
}

// timeCalls' steady-state time per call.
Status timePerCall(const std::function<Status(int, cudaStream_t)>& enqueue, int short_calls, int replays, cudaStream_t st,
                   double* us) {
  GraphTiming timing;
  MOEWB_STATUS_TRY(timeCalls(enqueue, short_calls, replays, st, &timing));
  *us = timing.per_call_us;
  return Status::success();
}

Status measureCopyBandwidth(cudaStream_t st, double* gbps) {
  const size_t bytes = size_t(1) << 30;
  DevMem a, b;
  MOEWB_STATUS_TRY(a.alloc(bytes));
  MOEWB_STATUS_TRY(b.alloc(bytes));
  MOEWB_CUDA_TRY(cudaMemsetAsync(a.p, 1, bytes, st));
  double us = 0;
  MOEWB_STATUS_TRY(timePerCall(
      [&](int, cudaStream_t s) -> Status {
        MOEWB_CUDA_TRY(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, s));
        return Status::success();
      },
      1, 10, st, &us));
  *gbps = 2.0 * double(bytes) / (us * 1e-6) / 1e9;
  return Status::success();
}

struct HostWeights {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales, zeros;  // row-major [n][k/64]
  std::vector<uint32_t> kw;
  std::vector<uint16_t> ks, kz;
};

// Random codes and realistic fp16 scales/zeros, packed through the export layout and the repack step,
// so every run also exercises the path a checkpoint takes.
Status makeWeights(int64_t n, int64_t k, bool symmetric, W3A16Type type, std::mt19937_64& rng, HostWeights* h) {
  h->codes.resize(size_t(n * k));
  for (auto& c : h->codes) c = uint8_t(rng() & 7);
  const int64_t groups = groupCount(n, k);
  h->scales.resize(size_t(groups));
  h->zeros.resize(size_t(groups));
  std::uniform_real_distribution<float> sd(0.002f, 0.02f), zd(1.0f, 6.0f);
  for (int64_t i = 0; i < groups; ++i) {
    h->scales[size_t(i)] = floatToHalfBits(sd(rng));
    h->zeros[size_t(i)] = floatToHalfBits(symmetric ? 4.0f : zd(rng));
  }
  std::vector<uint32_t> export_words(size_t(int3Words(n, k)));
  packInt3Export(h->codes.data(), n * k, export_words.data());
  h->kw.resize(export_words.size());
  h->ks.resize(size_t(groups));
  h->kz.resize(size_t(groups));
  return repackExportToW3A16(export_words.data(), h->scales.data(), symmetric ? nullptr : h->zeros.data(), n, k,
                             h->kw.data(), h->ks.data(), h->kz.data(), type);
}

// A random MiLo INT3 factor [rows, cols] (groups of 64 values, x = (q - 4) * 2s/7): the kernel layout
// (padded to pad_rows x pad_cols) and, for the CPU reference, the values it stands for as 16-bit bits of
// `type` (exactly what the kernel decodes: one rounding of q*s' - 4s' with s' = 2s/7 in `type`).
struct HostFactor {
  std::vector<uint32_t> kw;
  std::vector<uint16_t> ks;
  std::vector<uint16_t> values;  // [rows][cols]
};
Status makeInt3Factor(int64_t rows, int64_t cols, int64_t pad_rows, int64_t pad_cols, W3A16Type type,
                      std::mt19937_64& rng, HostFactor* f) {
  std::vector<uint8_t> codes(size_t(rows * cols));
  for (auto& c : codes) c = uint8_t(rng() & 7);
  std::uniform_real_distribution<float> sd(0.005f, 0.03f);
  std::vector<float> scales(size_t((rows * cols + 63) / 64));
  for (auto& v : scales) v = halfBitsToFloat(floatToHalfBits(sd(rng)));
  f->kw.assign(size_t(int3Words(pad_rows, pad_cols)), 0);
  f->ks.assign(size_t(groupCount(pad_rows, pad_cols)), 0);
  MOEWB_STATUS_TRY(packInt3FactorToW3A16(codes.data(), scales.data(), rows, cols, 64, pad_rows, pad_cols, type,
                                         f->kw.data(), f->ks.data()));
  auto to_float = [&](uint16_t b) { return type == W3A16Type::Bf16 ? bf16BitsToFloat(b) : halfBitsToFloat(b); };
  f->values.resize(codes.size());
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float s = to_float(floatToTypeBits(2.f * scales[size_t(i / 64)] / 7.f, type));
    f->values[size_t(i)] = floatToTypeBits(float(codes[size_t(i)]) * s - 4.f * s, type);
  }
  return Status::success();
}

__global__ void halfToBf16Kernel(const half* in, __nv_bfloat16* out, int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(__half2float(in[i]));
}

// Normalised error of y (fp16 [m][n]) on sampled rows against a double reference from the codes.
double cpuCheck(const HostWeights& h, const std::vector<uint16_t>& x, const std::vector<uint16_t>& y, int64_t m,
                int64_t n, int64_t k, const std::vector<int64_t>& rows, const std::vector<uint16_t>* u,
                const std::vector<uint16_t>* v, int rank, W3A16Type type, bool* all_finite) {
  // x, y, u, v are bits of `type`; the reference weights come from the exact fp16 scales and zeros.
  auto val = [type](uint16_t b) { return double(type == W3A16Type::Bf16 ? bf16BitsToFloat(b) : halfBitsToFloat(b)); };
  const int64_t groups_per_row = k / 64;
  std::vector<double> wrow(static_cast<size_t>(k));
  std::vector<double> t;  // X V^T
  if (u && rank > 0) {
    t.assign(size_t(m * rank), 0.0);
    for (int64_t mm = 0; mm < m; ++mm)
      for (int j = 0; j < rank; ++j) {
        double acc = 0;
        for (int64_t c = 0; c < k; ++c)
          acc += val(x[size_t(mm * k + c)]) * val((*v)[size_t(j * k + c)]);
        t[size_t(mm * rank + j)] = acc;
      }
  }
  double num = 0, den = 0;
  *all_finite = true;
  for (int64_t row : rows) {
    for (int64_t c = 0; c < k; ++c) {
      const int64_t gi = row * groups_per_row + c / 64;
      wrow[size_t(c)] = (double(h.codes[size_t(row * k + c)]) - halfBitsToFloat(h.zeros[size_t(gi)])) *
                        halfBitsToFloat(h.scales[size_t(gi)]);
    }
    for (int64_t mm = 0; mm < m; ++mm) {
      double ref = 0;
      for (int64_t c = 0; c < k; ++c) ref += wrow[size_t(c)] * val(x[size_t(mm * k + c)]);
      if (!t.empty())
        for (int j = 0; j < rank; ++j) ref += t[size_t(mm * rank + j)] * val((*u)[size_t(row * rank + j)]);
      const double got = val(y[size_t(mm * n + row)]);
      if (!std::isfinite(got)) *all_finite = false;
      num += (got - ref) * (got - ref);
      den += ref * ref;
    }
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double relDiff16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, W3A16Type type) {
  auto val = [type](uint16_t v) { return double(type == W3A16Type::Bf16 ? bf16BitsToFloat(v) : halfBitsToFloat(v)); };
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = val(a[i]), y = val(b[i]);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// A Markdown table cell of `text`: pipes escaped, so a label cannot add columns.
std::string markdownCell(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '|') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

// A JSON string literal of `text` (labels are tensor names, but a checkpoint can name tensors anything).
std::string jsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", unsigned(static_cast<unsigned char>(c)));
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

Status runGemmBenchmark(const GemmBenchOptions& o, GemmBenchReport* report, const LogFn& log,
                        const BenchProgressFn& progress) {
  if (!o.shape_labels.empty() && o.shape_labels.size() != o.shapes.size())
    return Status::failure(-1, "bench: " + std::to_string(o.shape_labels.size()) + " shape labels for " +
                                   std::to_string(o.shapes.size()) + " shapes");
  if (o.shapes.empty() || o.batches.empty()) return Status::failure(-1, "bench: no shape or no batch size to time");
  // Progress: each (shape, batch) row is one step of five parts (the check, then four timings).
  const double steps = double(std::max<size_t>(1, o.shapes.size() * o.batches.size()));
  size_t step = 0;
  auto goOn = [&](double part, const std::string& stage) {
    return !progress || progress(std::min(1.0, (double(step) + part / 5.0) / steps), stage);
  };
  if (!goOn(0, "starting")) return Status::cancelledDuring("starting");
  std::string why;
  if (!deviceAvailable(&why)) return Status::failure(-1, why);
  GemmBenchReport rep;
  MOEWB_STATUS_TRY(deviceInfo(&rep.device));
  rep.seed = o.seed ? o.seed : uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  std::mt19937_64 rng(rep.seed);
  cudaStream_t st = nullptr;
  MOEWB_CUDA_TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> st_guard(st, cudaStreamDestroy);
  MOEWB_STATUS_TRY(measureCopyBandwidth(st, &rep.copy_gbps));
  if (log) log("copy bandwidth " + fmt("%.0f", rep.copy_gbps) + " GB/s (read + write)");
  if (!goOn(0, "copy bandwidth measured")) return Status::cancelledDuring("the copy bandwidth");

  cublasHandle_t blas = nullptr;
  MOEWB_CUBLAS_TRY(cublasCreate(&blas));
  std::unique_ptr<cublasContext, decltype(&cublasDestroy)> blas_guard(blas, cublasDestroy);
  MOEWB_CUBLAS_TRY(cublasSetStream(blas, st));
  DevMem blas_ws;  // a fixed workspace keeps cuBLAS from allocating during graph capture
  const size_t blas_ws_bytes = size_t(64) << 20;
  MOEWB_STATUS_TRY(blas_ws.alloc(blas_ws_bytes));
  MOEWB_CUBLAS_TRY(cublasSetWorkspace(blas, blas_ws.p, blas_ws_bytes));

  const double l2 = double(std::max<int64_t>(rep.device.l2_bytes, 50 << 20));
  const int64_t max_m = *std::max_element(o.batches.begin(), o.batches.end());
  for (size_t shape_index = 0; shape_index < o.shapes.size(); ++shape_index) {
    const int64_t n = o.shapes[shape_index].first, k = o.shapes[shape_index].second;
    if (!w3a16ShapeSupported(n, k)) return Status::failure(-1, "bench: shape " + std::to_string(n) + "x" + std::to_string(k) + " not supported");
    const std::string shape_name = std::to_string(n) + "x" + std::to_string(k);
    if (!goOn(0, shape_name + ": weights")) return Status::cancelledDuring(shape_name + ": weights");
    HostWeights hw;
    const W3A16Type type = o.bf16 ? W3A16Type::Bf16 : W3A16Type::Fp16;
    const cudaDataType blas_type = o.bf16 ? CUDA_R_16BF : CUDA_R_16F;
    MOEWB_STATUS_TRY(makeWeights(n, k, o.symmetric, type, rng, &hw));
    // The dequantize kernel reads fp16 scales: in bf16 mode it gets an fp16 copy of the same weights.
    HostWeights hw_fp16;
    if (o.bf16) {
      std::mt19937_64 same(rep.seed ^ uint64_t(n * 131 + k));
      hw_fp16 = hw;
      std::vector<uint32_t> export_words(size_t(int3Words(n, k)));
      packInt3Export(hw.codes.data(), n * k, export_words.data());
      MOEWB_STATUS_TRY(repackExportToW3A16(export_words.data(), hw.scales.data(), o.symmetric ? nullptr : hw.zeros.data(),
                                           n, k, hw_fp16.kw.data(), hw_fp16.ks.data(), hw_fp16.kz.data()));
    }
    const size_t wbytes = hw.kw.size() * 4, sbytes = hw.ks.size() * 2;
    const size_t set_bytes = wbytes + sbytes * (o.symmetric ? 1 : 2);
    // Rotate among enough copies that one pass over them is at least twice the L2 size.
    const int nbuf = int(std::max<double>(3, std::ceil(2.0 * l2 / double(set_bytes))));
    std::vector<std::unique_ptr<DevMem>> wbuf, sbuf, zbuf;
    for (int i = 0; i < nbuf; ++i) {
      wbuf.push_back(std::make_unique<DevMem>());
      sbuf.push_back(std::make_unique<DevMem>());
      zbuf.push_back(std::make_unique<DevMem>());
      MOEWB_STATUS_TRY(wbuf.back()->alloc(wbytes));
      MOEWB_STATUS_TRY(sbuf.back()->alloc(sbytes));
      MOEWB_STATUS_TRY(zbuf.back()->alloc(sbytes));
      MOEWB_CUDA_TRY(cudaMemcpy(wbuf.back()->p, hw.kw.data(), wbytes, cudaMemcpyHostToDevice));
      MOEWB_CUDA_TRY(cudaMemcpy(sbuf.back()->p, hw.ks.data(), sbytes, cudaMemcpyHostToDevice));
      MOEWB_CUDA_TRY(cudaMemcpy(zbuf.back()->p, hw.kz.data(), sbytes, cudaMemcpyHostToDevice));
    }
    auto weights = [&](int i) {
      W3A16Weights w;
      w.packed = wbuf[size_t(i % nbuf)]->p;
      w.scales = sbuf[size_t(i % nbuf)]->p;
      w.bias = o.symmetric ? nullptr : zbuf[size_t(i % nbuf)]->p;
      w.n = n;
      w.k = k;
      w.type = type;
      return w;
    };
    // fp16 weights for cuBLAS, dequantized on the GPU from copy 0 (so both compute the same product).
    const size_t hbytes = size_t(n * k * 2);
    const int nbuf_h = o.baselines ? int(std::max<double>(2, std::ceil(2.0 * l2 / double(hbytes)))) : 0;
    std::vector<std::unique_ptr<DevMem>> hbuf;
    DevMem fp16_w, fp16_s, fp16_z;  // bf16 mode: the fp16-scale copy for the dequantize kernel
    W3A16Weights deq_src = weights(0);
    if (o.bf16 && o.baselines) {
      MOEWB_STATUS_TRY(fp16_w.alloc(wbytes));
      MOEWB_STATUS_TRY(fp16_s.alloc(sbytes));
      MOEWB_STATUS_TRY(fp16_z.alloc(sbytes));
      MOEWB_CUDA_TRY(cudaMemcpy(fp16_w.p, hw_fp16.kw.data(), wbytes, cudaMemcpyHostToDevice));
      MOEWB_CUDA_TRY(cudaMemcpy(fp16_s.p, hw_fp16.ks.data(), sbytes, cudaMemcpyHostToDevice));
      MOEWB_CUDA_TRY(cudaMemcpy(fp16_z.p, hw_fp16.kz.data(), sbytes, cudaMemcpyHostToDevice));
      deq_src.packed = fp16_w.p;
      deq_src.scales = fp16_s.p;
      deq_src.bias = o.symmetric ? nullptr : fp16_z.p;
      deq_src.type = W3A16Type::Fp16;
    }
    for (int i = 0; i < nbuf_h; ++i) {
      hbuf.push_back(std::make_unique<DevMem>());
      MOEWB_STATUS_TRY(hbuf.back()->alloc(hbytes));
      MOEWB_STATUS_TRY(w3a16Dequantize(deq_src, hbuf.back()->p, st));
      if (o.bf16) {  // cuBLAS bf16 on the same weights, converted in place
        DevMem tmp;
        MOEWB_STATUS_TRY(tmp.alloc(hbytes));
        halfToBf16Kernel<<<1024, 256, 0, st>>>(hbuf.back()->as<half>(), tmp.as<__nv_bfloat16>(), n * k);
        MOEWB_CUDA_TRY(cudaGetLastError());
        MOEWB_CUDA_TRY(cudaMemcpyAsync(hbuf.back()->p, tmp.p, hbytes, cudaMemcpyDeviceToDevice, st));
        MOEWB_CUDA_TRY(cudaStreamSynchronize(st));
      }
    }
    // Activations, outputs, compensator, scratch.
    std::vector<uint16_t> hx(size_t(max_m * k));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : hx) v = floatToTypeBits(nd(rng), type);
    DevMem dx, dy, dy_ref, ws;
    MOEWB_STATUS_TRY(dx.alloc(hx.size() * 2));
    MOEWB_CUDA_TRY(cudaMemcpy(dx.p, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    MOEWB_STATUS_TRY(dy.alloc(size_t(max_m * n * 2)));
    MOEWB_STATUS_TRY(dy_ref.alloc(size_t(max_m * n * 2)));
    const int rank = o.compensator_rank;
    const int64_t ws_bytes = w3a16WorkspaceBytes(n);
    MOEWB_STATUS_TRY(ws.alloc(size_t(ws_bytes)));
    MOEWB_CUDA_TRY(cudaMemset(ws.p, 0, size_t(ws_bytes)));
    std::vector<uint16_t> hu, hv;
    LowRankCompensator comp;
    HostFactor fu, fv;
    DevMem duw, dus, dvw, dvs;
    if (rank > 0) {
      // MiLo's storage: INT3 U [n, rank] and V [rank, k] in the kernel layout (stream-K kernel).
      const int64_t u_cols = (rank + 63) / 64 * 64, v_rows = rank <= 64 ? 64 : 128;
      MOEWB_STATUS_TRY(makeInt3Factor(n, rank, n, u_cols, type, rng, &fu));
      MOEWB_STATUS_TRY(makeInt3Factor(rank, k, v_rows, k, type, rng, &fv));
      for (const auto& pr : {std::make_pair(&duw, &fu.kw), std::make_pair(&dvw, &fv.kw)}) {
        MOEWB_STATUS_TRY(pr.first->alloc(pr.second->size() * 4));
        MOEWB_CUDA_TRY(cudaMemcpy(pr.first->p, pr.second->data(), pr.second->size() * 4, cudaMemcpyHostToDevice));
      }
      for (const auto& pr : {std::make_pair(&dus, &fu.ks), std::make_pair(&dvs, &fv.ks)}) {
        MOEWB_STATUS_TRY(pr.first->alloc(pr.second->size() * 2));
        MOEWB_CUDA_TRY(cudaMemcpy(pr.first->p, pr.second->data(), pr.second->size() * 2, cudaMemcpyHostToDevice));
      }
      hu = fu.values;
      hv = fv.values;
      comp.rank = rank;
      comp.u3 = {duw.p, dus.p, nullptr, n, u_cols, type};
      comp.v3 = {dvw.p, dvs.p, nullptr, v_rows, k, type};
    }
    // Sampled rows for the CPU reference: all rows of small shapes, 96 spread rows of large ones.
    std::vector<int64_t> rows;
    if (n <= 256) {
      for (int64_t r = 0; r < n; ++r) rows.push_back(r);
    } else {
      std::uniform_int_distribution<int64_t> rd(0, n - 1);
      for (int i = 0; i < 96; ++i) rows.push_back(rd(rng));
      rows.push_back(0);
      rows.push_back(n - 1);
    }

    for (int64_t m : o.batches) {
      GemmBenchRow row;
      row.n = n;
      row.k = k;
      row.m = m;
      if (!o.shape_labels.empty()) row.label = o.shape_labels[shape_index];
      W3A16Config cfg;
      cfg.ctas = o.ctas;
      row.ctas = w3a16Ctas(m, n, k, &cfg);
      const std::string row_name = shape_name + " m=" + std::to_string(m);
      auto cancelled = [&](double part, const char* what) {
        return goOn(part, row_name + ": " + what) ? std::optional<Status>() : Status::cancelledDuring(row_name + ": " + what);
      };
      if (auto c = cancelled(0, "check against the CPU")) return *c;
      // Correctness first, on a poisoned output (0xFFFF is a NaN in fp16).
      std::vector<uint16_t> hy(size_t(m * n));
      MOEWB_CUDA_TRY(cudaMemsetAsync(dy.p, 0xFF, size_t(m * n * 2), st));
      MOEWB_STATUS_TRY(w3a16Gemm(dx.p, weights(0), dy.p, m, nullptr, ws.p, ws_bytes, st, &cfg));
      MOEWB_CUDA_TRY(cudaStreamSynchronize(st));
      MOEWB_CUDA_TRY(cudaMemcpy(hy.data(), dy.p, hy.size() * 2, cudaMemcpyDeviceToHost));
      bool finite = true;
      row.rel_err_cpu = cpuCheck(hw, hx, hy, m, n, k, rows, nullptr, nullptr, 0, type, &finite);
      bool all_written = true;
      for (uint16_t v : hy)  // the poison 0xFFFF is a NaN in both types
        if (o.bf16 ? (v & 0x7F80u) == 0x7F80u : (v & 0x7C00u) == 0x7C00u) all_written = false;
      // bf16 keeps 8 significant bits (X, the decoded weights and Y are rounded to it): ~4e-3 expected.
      const double tol = o.bf16 ? 1.5e-2 : 3e-3;
      row.correct = finite && all_written && row.rel_err_cpu < tol;
      if (o.baselines) {
        const float alpha = 1.f, beta = 0.f;
        MOEWB_CUBLAS_TRY(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, hbuf[0]->p, blas_type,
                                      int(k), dx.p, blas_type, int(k), &beta, dy_ref.p, blas_type, int(n),
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        std::vector<uint16_t> hr(hy.size());
        MOEWB_CUDA_TRY(cudaStreamSynchronize(st));
        MOEWB_CUDA_TRY(cudaMemcpy(hr.data(), dy_ref.p, hr.size() * 2, cudaMemcpyDeviceToHost));
        row.rel_err_vs_cublas = relDiff16(hy, hr, type);
        row.correct = row.correct && row.rel_err_vs_cublas < tol;
      }
      if (rank > 0) {
        MOEWB_CUDA_TRY(cudaMemsetAsync(dy.p, 0xFF, size_t(m * n * 2), st));
        MOEWB_STATUS_TRY(w3a16Gemm(dx.p, weights(0), dy.p, m, &comp, ws.p, ws_bytes, st, &cfg));
        MOEWB_CUDA_TRY(cudaStreamSynchronize(st));
        MOEWB_CUDA_TRY(cudaMemcpy(hy.data(), dy.p, hy.size() * 2, cudaMemcpyDeviceToHost));
        row.rel_err_comp_cpu = cpuCheck(hw, hx, hy, m, n, k, rows, &hu, &hv, rank, type, &finite);
        row.correct = row.correct && finite && row.rel_err_comp_cpu < tol;
      }
      rep.all_correct = rep.all_correct && row.correct;

      if (auto c = cancelled(1, "timing W3A16")) return *c;
      const int per_graph = std::max(20, nbuf);
      GraphTiming plain;
      MOEWB_STATUS_TRY(timeCalls(
          [&](int i, cudaStream_t s) { return w3a16Gemm(dx.p, weights(i), dy.p, m, nullptr, ws.p, ws_bytes, s, &cfg); },
          per_graph, o.replays, st, &plain));
      row.w3a16_us = plain.per_call_us;
      row.w3a16_graph_us = plain.graph_us;
      row.graph_calls = per_graph;
      if (rank > 0) {
        if (auto c = cancelled(2, "timing W3A16 with the compensator")) return *c;
        MOEWB_STATUS_TRY(timePerCall(
            [&](int i, cudaStream_t s) { return w3a16Gemm(dx.p, weights(i), dy.p, m, &comp, ws.p, ws_bytes, s, &cfg); },
            per_graph, o.replays, st, &row.w3a16_comp_us));
      }
      if (o.baselines) {
        if (auto c = cancelled(3, "timing cuBLAS")) return *c;
        const float alpha = 1.f, beta = 0.f;
        auto gemm = [&](int i, cudaStream_t) -> Status {
          MOEWB_CUBLAS_TRY(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha,
                                        hbuf[size_t(i % nbuf_h)]->p, blas_type, int(k), dx.p, blas_type, int(k), &beta,
                                        dy_ref.p, blas_type, int(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
          return Status::success();
        };
        GraphTiming cublas;
        MOEWB_STATUS_TRY(timeCalls(gemm, std::max(20, nbuf_h), o.replays, st, &cublas));
        row.cublas_us = cublas.per_call_us;
        row.cublas_graph_us = cublas.graph_us;
        if (auto c = cancelled(4, "timing dequantize + cuBLAS")) return *c;
        if (!o.bf16)  // the dequantize kernel writes fp16 only
          MOEWB_STATUS_TRY(timePerCall(
              [&](int i, cudaStream_t s) -> Status {
                MOEWB_STATUS_TRY(w3a16Dequantize(weights(i), hbuf[size_t(i % nbuf_h)]->p, s));
                return gemm(i, s);
              },
              std::max(20, nbuf), o.replays, st, &row.dequant_cublas_us));
      }
      row.bytes = double(set_bytes) + double(m * k * 2) + double(m * n * 2);
      row.tflops = 2.0 * double(m) * double(n) * double(k) / (row.w3a16_us * 1e-6) / 1e12;
      row.gbps = row.bytes / (row.w3a16_us * 1e-6) / 1e9;
      row.pct_of_copy = 100.0 * row.gbps / rep.copy_gbps;
      if (row.cublas_us > 0) row.speedup_vs_cublas = row.cublas_us / row.w3a16_us;
      if (row.dequant_cublas_us > 0) row.speedup_vs_dequant = row.dequant_cublas_us / row.w3a16_us;
      if (row.w3a16_comp_us > 0) row.comp_overhead_pct = 100.0 * (row.w3a16_comp_us / row.w3a16_us - 1.0);
      if (log)
        log(std::to_string(n) + "x" + std::to_string(k) + " m=" + std::to_string(m) + ": " + fmt("%.2f", row.w3a16_us) +
            " us (cuBLAS " + fmt("%.2f", row.cublas_us) + ", x" + fmt("%.2f", row.speedup_vs_cublas) + "), err " +
            fmt("%.2e", row.rel_err_cpu) + (row.correct ? "" : "  WRONG"));
      rep.rows.push_back(row);
      ++step;
    }
  }
  if (progress) progress(1.0, "done");
  *report = std::move(rep);
  return Status::success();
}

GraphTiming graphTimingFromReplays(const std::vector<double>& short_replay_us, const std::vector<double>& long_replay_us,
                                   int short_calls, int long_calls) {
  GraphTiming t;
  const size_t rounds = std::min(short_replay_us.size(), long_replay_us.size());
  if (rounds == 0 || short_calls <= 0 || long_calls <= short_calls) return t;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
  };
  // Each round's two replays ran back to back, so their difference cancels drifts slower than a round.
  std::vector<double> slopes(rounds), averages(rounds);
  for (size_t r = 0; r < rounds; ++r) {
    slopes[r] = (long_replay_us[r] - short_replay_us[r]) / double(long_calls - short_calls);
    averages[r] = short_replay_us[r] / double(short_calls);
  }
  t.per_call_us = median(slopes);
  t.graph_us = median(averages);
  return t;
}

std::string gemmReportMarkdown(const GemmBenchReport& r) {
  // A last column says what each shape is when the shapes came with labels (a model's matrices).
  const bool labelled = std::any_of(r.rows.begin(), r.rows.end(), [](const GemmBenchRow& x) { return !x.label.empty(); });
  std::ostringstream s;
  s << "Device: " << r.device.name << " (" << r.device.multiprocessors << " SMs, L2 " << r.device.l2_bytes / (1 << 20)
    << " MiB), measured copy bandwidth " << fmt("%.0f", r.copy_gbps) << " GB/s (read + write); seed " << r.seed << "\n\n";
  s << "| n x k | m | CTAs | W3A16 us | in one graph us (calls) | +comp us (ovh %) | cuBLAS fp16 us | deq+cuBLAS us | speedup vs cuBLAS | vs deq+cuBLAS "
       "| TFLOP/s | GB/s | % copy BW | err vs CPU | err comp | err vs cuBLAS | ok |"
    << (labelled ? " tensors |" : "") << "\n";
  s << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" << (labelled ? "---|" : "") << "\n";
  // A measurement that did not run (no compensator, baselines off) reads "—", as in the GUI's table, not 0.
  const std::string dash = "\u2014";
  auto measured = [&](double v, const char* format) { return v > 0 ? fmt(format, v) : dash; };
  for (const auto& x : r.rows) {
    const bool comp = x.w3a16_comp_us > 0, baseline = x.cublas_us > 0;
    const std::string comp_cell = comp ? fmt("%.2f", x.w3a16_comp_us) + " (" + fmt("%+.1f", x.comp_overhead_pct) + ")" : dash;
    s << "| " << x.n << "x" << x.k << " | " << x.m << " | " << x.ctas << " | "
      << fmt("%.2f", x.w3a16_us) << " | " << fmt("%.2f", x.w3a16_graph_us) << " (" << x.graph_calls << ") | " << comp_cell
      << " | " << measured(x.cublas_us, "%.2f") << " | " << measured(x.dequant_cublas_us, "%.2f") << " | "
      << measured(x.speedup_vs_cublas, "%.2f") << " | " << measured(x.speedup_vs_dequant, "%.2f") << " | "
      << fmt("%.1f", x.tflops) << " | " << fmt("%.0f", x.gbps) << " | " << fmt("%.0f", x.pct_of_copy) << " | "
      << fmt("%.1e", x.rel_err_cpu) << " | " << (comp ? fmt("%.1e", x.rel_err_comp_cpu) : dash) << " | "
      << (baseline ? fmt("%.1e", x.rel_err_vs_cublas) : dash) << " | " << (x.correct ? "yes" : "NO")
      << " |" << (labelled ? " " + markdownCell(x.label) + " |" : std::string()) << "\n";
  }
  return s.str();
}

std::string gemmReportJson(const GemmBenchReport& r) {
  std::ostringstream s;
  s << "{\"device\":" << jsonString(r.device.name) << ",\"sms\":" << r.device.multiprocessors << ",\"copy_gbps\":" << r.copy_gbps
    << ",\"seed\":" << r.seed << ",\"all_correct\":" << (r.all_correct ? "true" : "false") << ",\"rows\":[";
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const auto& x = r.rows[i];
    s << (i ? "," : "") << "{\"n\":" << x.n << ",\"k\":" << x.k << ",\"m\":" << x.m
      << (x.label.empty() ? std::string() : ",\"label\":" + jsonString(x.label)) << ",\"ctas\":" << x.ctas
      << ",\"w3a16_us\":" << x.w3a16_us << ",\"w3a16_comp_us\":" << x.w3a16_comp_us << ",\"cublas_us\":" << x.cublas_us
      << ",\"dequant_cublas_us\":" << x.dequant_cublas_us << ",\"w3a16_graph_us\":" << x.w3a16_graph_us
      << ",\"cublas_graph_us\":" << x.cublas_graph_us << ",\"graph_calls\":" << x.graph_calls << ",\"tflops\":" << x.tflops << ",\"gbps\":" << x.gbps
      << ",\"pct_of_copy\":" << x.pct_of_copy << ",\"speedup_vs_cublas\":" << x.speedup_vs_cublas
      << ",\"speedup_vs_dequant_cublas\":" << x.speedup_vs_dequant << ",\"comp_overhead_pct\":" << x.comp_overhead_pct
      << ",\"rel_err_cpu\":" << x.rel_err_cpu << ",\"rel_err_comp_cpu\":" << x.rel_err_comp_cpu
      << ",\"rel_err_vs_cublas\":" << x.rel_err_vs_cublas << ",\"correct\":" << (x.correct ? "true" : "false") << "}";
  }
  s << "]}";
  return s.str();
}

// ---- quantizers -------------------------------------------------------------------------------------

void hqqReferenceHost(const float* x, int64_t rows, int64_t k, uint8_t* codes, float* scales, float* zeros,
                      double lp_norm, double beta0, double kappa, int max_steps, int patience) {
  auto half_round = [](float v) { return halfBitsToFloat(floatToHalfBits(v)); };
  const int64_t gpr = k / 64;
  const float p_minus_1 = float(lp_norm - 1.0), max_code = 7.0f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < gpr; ++g) {
      const float* w = x + r * k + g * 64;
      float lo = w[0], hi = w[0];
      for (int i = 1; i < 64; ++i) {
        lo = std::min(lo, w[i]);
        hi = std::max(hi, w[i]);
      }
      const float max_abs = std::max(std::abs(lo), std::abs(hi));
      float step = (hi - lo) / max_code;
      step = std::max({step, 5e-5f, max_abs / 30000.0f});
      step = half_round(step);
      const float inv_step = 1.0f / step;
      float zero = half_round(-lo / step), best_zero = zero;
      double best_err = std::numeric_limits<double>::infinity(), beta = beta0;
      int since_best = 0;
      float code[64], err[64];
      for (int s = 0; s <= max_steps; ++s) {
        float e2 = 0;
        for (int i = 0; i < 64; ++i) {
          code[i] = std::min(std::max(std::nearbyint(w[i] * inv_step + zero), 0.0f), max_code);
          err[i] = w[i] - (code[i] - zero) * step;
          e2 += err[i] * err[i];
        }
        if (double(e2) < best_err) {
          best_err = e2;
          best_zero = zero;
          since_best = 0;
        } else if (++since_best >= patience) {
          break;
        }
        if (s == max_steps) break;
        double sum = 0;
        for (int i = 0; i < 64; ++i) {
          const float mag = std::abs(err[i]);
          const float sh = std::max(mag - std::exp(p_minus_1 * std::log(mag)) / float(beta), 0.0f) *
                           (err[i] > 0 ? 1.0f : (err[i] < 0 ? -1.0f : 0.0f));
          sum += double(code[i] - (w[i] - sh) * inv_step);
        }
        zero = half_round(float(sum / 64.0));
        beta *= kappa;
      }
      for (int i = 0; i < 64; ++i)
        codes[r * k + g * 64 + i] = uint8_t(std::min(std::max(std::nearbyint(w[i] * inv_step + best_zero), 0.0f), max_code));
      scales[r * gpr + g] = step;
      zeros[r * gpr + g] = best_zero;
    }
}

namespace {

// Weights with a realistic shape: Gaussian bulk plus a few heavy-tailed outliers and a weak low-rank part.
std::vector<float> syntheticWeights(int64_t n, int64_t k, std::mt19937_64& rng) {
  std::vector<float> w(size_t(n * k));
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::student_t_distribution<float> td(3.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (auto& v : w) v = ud(rng) < 0.001f ? 0.02f * td(rng) * 3.0f : nd(rng);
  return w;
}

}  // namespace

Status runQuantizeBenchmark(const QuantizeBenchOptions& o, QuantizeBenchReport* report, const LogFn& log,
                            const BenchProgressFn& progress) {
  // Progress: HQQ, the MiLo calls (repeats + 1), the baseline, and the model estimate's four batches.
  const int milo_calls = std::max(1, o.repeats) + 1;
  const double steps = 2.0 + milo_calls + (o.model_estimate ? 4.0 : 0.0);
  double step = 0;
  auto stop = [&](const std::string& stage) -> std::optional<Status> {
    if (!progress || progress(std::min(1.0, step++ / steps), stage)) return std::nullopt;
    return Status::cancelledDuring(stage);
  };
  if (auto c = stop("HQQ")) return *c;
  std::string why;
  if (!deviceAvailable(&why)) return Status::failure(-1, why);
  QuantizeBenchReport rep;
  MOEWB_STATUS_TRY(deviceInfo(&rep.device));
  const uint64_t seed = o.seed ? o.seed : uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  std::mt19937_64 rng(seed);
  cudaStream_t st = nullptr;
  MOEWB_CUDA_TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> st_guard(st, cudaStreamDestroy);
  const int64_t n = o.n, k = o.k, count = n * k;
  const std::vector<float> hw = syntheticWeights(n, k, rng);
  DevMem dw, dcodes, dscales, dzeros;
  MOEWB_STATUS_TRY(dw.alloc(size_t(count) * 4));
  MOEWB_STATUS_TRY(dcodes.alloc(size_t(count)));
  MOEWB_STATUS_TRY(dscales.alloc(size_t(count / 64) * 4));
  MOEWB_STATUS_TRY(dzeros.alloc(size_t(count / 64) * 4));
  MOEWB_CUDA_TRY(cudaMemcpy(dw.p, hw.data(), size_t(count) * 4, cudaMemcpyHostToDevice));
  GpuHqqOptions ho;

  // HQQ: time (events, median) and compare a slice with the CPU reference.
  {
    Events ev;
    MOEWB_CUDA_TRY(cudaEventCreate(&ev.a));
    MOEWB_CUDA_TRY(cudaEventCreate(&ev.b));
    std::vector<double> t;
    for (int r = 0; r < std::max(3, o.repeats) + 1; ++r) {
      MOEWB_CUDA_TRY(cudaEventRecord(ev.a, st));
      MOEWB_STATUS_TRY(hqqQuantizeBatched(dw.as<float>(), 1, n, k, ho, dcodes.as<uint8_t>(), dscales.as<float>(),
                                          dzeros.as<float>(), nullptr, st));
      MOEWB_CUDA_TRY(cudaEventRecord(ev.b, st));
      MOEWB_CUDA_TRY(cudaEventSynchronize(ev.b));
      float ms = 0;
      MOEWB_CUDA_TRY(cudaEventElapsedTime(&ms, ev.a, ev.b));
      if (r > 0) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    rep.hqq_ms = t[t.size() / 2];
    const int64_t rows = std::min(o.check_rows, n);
    std::vector<uint8_t> gc(size_t(rows * k)), cc(size_t(rows * k));
    std::vector<float> gs(size_t(rows * k / 64)), gz(gs.size()), cs(gs.size()), cz(gs.size());
    MOEWB_CUDA_TRY(cudaMemcpy(gc.data(), dcodes.p, gc.size(), cudaMemcpyDeviceToHost));
    MOEWB_CUDA_TRY(cudaMemcpy(gs.data(), dscales.p, gs.size() * 4, cudaMemcpyDeviceToHost));
    MOEWB_CUDA_TRY(cudaMemcpy(gz.data(), dzeros.p, gz.size() * 4, cudaMemcpyDeviceToHost));
    hqqReferenceHost(hw.data(), rows, k, cc.data(), cs.data(), cz.data());
    int64_t mismatched = 0;
    for (size_t i = 0; i < gc.size(); ++i) mismatched += gc[i] != cc[i];
    rep.code_mismatch_fraction = double(mismatched) / double(gc.size());
    for (size_t i = 0; i < gs.size(); ++i) {
      rep.max_zero_diff = std::max(rep.max_zero_diff, double(std::abs(gz[i] - cz[i])));
      rep.max_scale_rel_diff = std::max(rep.max_scale_rel_diff, double(std::abs(gs[i] - cs[i]) / cs[i]));
    }
    rep.matches_cpu = rep.code_mismatch_fraction < 1e-3 && rep.max_scale_rel_diff == 0.0;
    if (log)
      log("HQQ " + fmt("%.2f", rep.hqq_ms) + " ms; vs CPU: codes differ " + fmt("%.2e", rep.code_mismatch_fraction) +
          ", max |zero diff| " + fmt("%.3g", rep.max_zero_diff));
  }
  // MiLo and the HQQ-then-SVD baseline (host wall clock around the whole call: allocations included).
  {
    std::vector<double> t;
    GpuMiloOptions mo;
    mo.rank = o.rank;
    mo.iterations = o.iterations;
    GpuMiloReport mr;
    for (int r = 0; r < milo_calls; ++r) {
      if (auto c = stop("MiLo, call " + std::to_string(r + 1) + " of " + std::to_string(milo_calls))) return *c;
      const auto t0 = std::chrono::steady_clock::now();
      MOEWB_STATUS_TRY(miloCompressBatched(dw.as<float>(), 1, n, k, mo, dcodes.as<uint8_t>(), dscales.as<float>(),
                                           dzeros.as<float>(), nullptr, nullptr, &mr, st));
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) t.push_back(ms);  // the first call creates the cuBLAS/cuSOLVER handles
    }
    std::sort(t.begin(), t.end());
    rep.milo_ms = t[t.size() / 2];
    rep.milo_err = mr.relative_error[0];
    rep.hqq_err = mr.hqq_relative_error[0];
    rep.milo_history = mr.error_history[0];
    if (auto c = stop("HQQ then a rank-" + std::to_string(o.rank) + " fit")) return *c;
    const auto t0 = std::chrono::steady_clock::now();
    GpuMiloReport br;
    MOEWB_STATUS_TRY(hqqThenLowRankBatched(dw.as<float>(), 1, n, k, o.rank, o.svd_steps, ho, &br, st));
    rep.hqq_svd_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    rep.hqq_svd_err = br.relative_error[0];
    if (log)
      log("MiLo r=" + std::to_string(o.rank) + " x" + std::to_string(o.iterations) + ": " + fmt("%.1f", rep.milo_ms) +
          " ms, err " + fmt("%.5f", rep.milo_err) + " (HQQ " + fmt("%.5f", rep.hqq_err) + ", HQQ+SVD " +
          fmt("%.5f", rep.hqq_svd_err) + ")");
  }
  // Model estimate: Mixtral-8x7B has 32 layers x 8 experts x (w1, w3: 14336x4096; w2: 4096x14336) and
  // attention q/o 4096x4096, k/v 1024x4096. dense-512+kurtosis-16: rank 512 on the attention matrices,
  // rank 16 on the experts (the kurtosis policy's cap; every expert is charged the cap, an upper bound).
  if (o.model_estimate) {
    auto timeMilo = [&](int64_t batch, int64_t rn, int64_t rk, int rank, double* ms) -> Status {
      if (auto c = stop("model estimate, " + std::to_string(batch) + " x " + std::to_string(rn) + "x" + std::to_string(rk) +
                        " rank " + std::to_string(rank)))
        return *c;
      DevMem w;
      MOEWB_STATUS_TRY(w.alloc(size_t(batch * rn * rk) * 4));
      const size_t cnt = size_t(batch * rn * rk);
      std::vector<float> hb(size_t(rn * rk));
      std::normal_distribution<float> nd(0.0f, 0.02f);
      for (auto& v : hb) v = nd(rng);
      for (int64_t b = 0; b < batch; ++b)
        MOEWB_CUDA_TRY(cudaMemcpy(w.as<float>() + b * rn * rk, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice));
      (void)cnt;
      DevMem c, s, z;
      MOEWB_STATUS_TRY(c.alloc(size_t(batch * rn * rk)));
      MOEWB_STATUS_TRY(s.alloc(size_t(batch * rn * rk / 64) * 4));
      MOEWB_STATUS_TRY(z.alloc(size_t(batch * rn * rk / 64) * 4));
      GpuMiloOptions mo;
      mo.rank = rank;
      mo.iterations = o.iterations;
      GpuMiloReport mr;
      const auto t0 = std::chrono::steady_clock::now();
      MOEWB_STATUS_TRY(miloCompressBatched(w.as<float>(), batch, rn, rk, mo, c.as<uint8_t>(), s.as<float>(), z.as<float>(),
                                           nullptr, nullptr, &mr, st));
      *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      return Status::success();
    };
    MOEWB_STATUS_TRY(timeMilo(8, 14336, 4096, 16, &rep.expert_batch_ms));
    MOEWB_STATUS_TRY(timeMilo(8, 4096, 14336, 16, &rep.expert_batch_ms_w2));
    MOEWB_STATUS_TRY(timeMilo(2, 4096, 4096, 512, &rep.attn_q_ms));
    MOEWB_STATUS_TRY(timeMilo(2, 1024, 4096, 512, &rep.attn_kv_ms));
    // Per layer: w1+w3 batches (2 x 8 experts), one w2 batch, q+o (one batch of 2), k+v (one batch of 2).
    rep.model_estimate_s = 32.0 * (2 * rep.expert_batch_ms + rep.expert_batch_ms_w2 + rep.attn_q_ms + rep.attn_kv_ms) / 1000.0;
    if (log)
      log("model estimate: " + fmt("%.1f", rep.model_estimate_s) + " s (8 experts 14336x4096 r16: " +
          fmt("%.0f", rep.expert_batch_ms) + " ms, 4096x14336: " + fmt("%.0f", rep.expert_batch_ms_w2) +
          " ms; 2x 4096x4096 r512: " + fmt("%.0f", rep.attn_q_ms) + " ms; 2x 1024x4096 r512: " + fmt("%.0f", rep.attn_kv_ms) + " ms)");
  }
  if (progress) progress(1.0, "done");
  *report = std::move(rep);
  return Status::success();
}

std::string quantizeReportMarkdown(const QuantizeBenchReport& r, const QuantizeBenchOptions& o) {
  std::ostringstream s;
  s << "Device: " << r.device.name << "; matrix " << o.n << "x" << o.k << ", rank " << o.rank << ", " << o.iterations
    << " MiLo iterations\n\n";
  s << "| step | time | relative error ||W - W_hat|| / ||W|| |\n|---|---|---|\n";
  s << "| HQQ (GPU, 20 steps) | " << fmt("%.2f", r.hqq_ms) << " ms | " << fmt("%.5f", r.hqq_err) << " |\n";
  s << "| HQQ then rank-" << o.rank << " fit (" << o.svd_steps << " subspace steps) | " << fmt("%.1f", r.hqq_svd_ms)
    << " ms | " << fmt("%.5f", r.hqq_svd_err) << " |\n";
  s << "| MiLo (GPU) | " << fmt("%.1f", r.milo_ms) << " ms | " << fmt("%.5f", r.milo_err) << " |\n\n";
  s << "Speed-up over the 0.66 s Python reference: " << fmt("%.1f", 660.0 / r.milo_ms) << "x. ";
  s << "GPU HQQ vs CPU reference: " << fmt("%.2e", r.code_mismatch_fraction) << " of codes differ, max |zero diff| "
    << fmt("%.3g", r.max_zero_diff) << ", max scale rel. diff " << fmt("%.3g", r.max_scale_rel_diff) << ".\n";
  if (r.model_estimate_s > 0)
    s << "\nMixtral-8x7B-shaped model, dense-512+kurtosis-16, estimated from per-batch timings: "
      << fmt("%.1f", r.model_estimate_s) << " s (8 experts 14336x4096 r16 " << fmt("%.0f", r.expert_batch_ms)
      << " ms, 8 experts 4096x14336 r16 " << fmt("%.0f", r.expert_batch_ms_w2) << " ms, q+o 4096x4096 r512 "
      << fmt("%.0f", r.attn_q_ms) << " ms, k+v 1024x4096 r512 " << fmt("%.0f", r.attn_kv_ms) << " ms, x32 layers).\n";
  return s.str();
}

std::string quantizeReportJson(const QuantizeBenchReport& r, const QuantizeBenchOptions& o) {
  std::ostringstream s;
  s << "{\"device\":\"" << r.device.name << "\",\"n\":" << o.n << ",\"k\":" << o.k << ",\"rank\":" << o.rank
    << ",\"iterations\":" << o.iterations << ",\"hqq_ms\":" << r.hqq_ms << ",\"hqq_err\":" << r.hqq_err
    << ",\"milo_ms\":" << r.milo_ms << ",\"milo_err\":" << r.milo_err << ",\"hqq_svd_ms\":" << r.hqq_svd_ms
    << ",\"hqq_svd_err\":" << r.hqq_svd_err << ",\"code_mismatch_fraction\":" << r.code_mismatch_fraction
    << ",\"max_zero_diff\":" << r.max_zero_diff << ",\"model_estimate_s\":" << r.model_estimate_s << ",\"milo_history\":[";
  for (size_t i = 0; i < r.milo_history.size(); ++i) s << (i ? "," : "") << r.milo_history[i];
  s << "]}";
  return s.str();
}

}  // namespace moewb::gpu

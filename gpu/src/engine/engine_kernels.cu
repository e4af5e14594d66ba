// SPDX-License-Identifier: MIT
#include "engine_kernels.h"

#include <fmt/format.h>

#include <cfloat>

#include "moewb/error.h"

namespace moewb::gpu::engine_kernels {
namespace {

void checkLaunch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw Error(fmt::format("cuda: launching {} failed: {}", kernel, cudaGetErrorString(e)));
}

unsigned blocksFor(int64_t count, int threads) {
  return static_cast<unsigned>((count + threads - 1) / threads);
}

// Sum of a block's values (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
template <typename T>
__device__ T blockSum(T v, T* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < int(blockDim.x / 32); ++w) total += shared[w];
  __syncthreads();
  return total;
}

__device__ float blockMax(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < int(blockDim.x / 32); ++w) m = fmaxf(m, shared[w]);
  __syncthreads();
  return m;
}

__global__ void embedKernel(const void* table, bool bf16, const int32_t* ids, int64_t n, int64_t hidden, float mult,
                            float* out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n * hidden) return;
  const int64_t t = i / hidden, c = i % hidden;
  const int64_t src = int64_t(ids[t]) * hidden + c;
  const float v = bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(table)[src])
                       : static_cast<const float*>(table)[src];
  out[i] = mult == 1.0f ? v : v * mult;
}

__global__ void rmsNormKernel(const float* x, int64_t dim, int64_t xs, const float* w, float eps, float* y,
                              int64_t ys) {
  __shared__ double partial[32];
  const float* xr = x + blockIdx.x * xs;
  float* yr = y + blockIdx.x * ys;
  double acc = 0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) acc += double(xr[i]) * double(xr[i]);
  acc = blockSum(acc, partial);
  const float variance = float(acc / double(dim));
  const float inv = 1.0f / sqrtf(variance + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = __fmul_rn(xr[i], inv);
    yr[i] = w ? __fmul_rn(w[i], v) : v;
  }
}

__global__ void toBf16Kernel(const float* x, int64_t count, __nv_bfloat16* y) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < count) y[i] = __float2bfloat16(x[i]);
}

__global__ void fromBf16Kernel(const __nv_bfloat16* x, int64_t count, float* y) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < count) y[i] = __bfloat162float(x[i]);
}

__global__ void fromBf16StridedKernel(const __nv_bfloat16* x, int64_t rows, int64_t cols, float* y, int64_t ldy) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < rows * cols) y[(i / cols) * ldy + i % cols] = __bfloat162float(x[i]);
}

__global__ void addBiasKernel(float* y, int64_t rows, int64_t cols, const float* b) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < rows * cols) y[i] += b[i % cols];
}

__global__ void clampKernel(float* x, int64_t count, float limit) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < count) x[i] = fminf(fmaxf(x[i], -limit), limit);
}

__global__ void ropeKernel(float* x, int64_t rows, int heads, int64_t head_stride, int64_t row_stride,
                           const int64_t* pos, const float* cos_t, const float* sin_t, int half, bool interleaved) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows * heads * half) return;
  const int64_t t = i / (int64_t(heads) * half);
  const int h = int((i / half) % heads), k = int(i % half);
  float* v = x + t * row_stride + h * head_stride;
  const float c = cos_t[pos[t] * half + k], s = sin_t[pos[t] * half + k];
  if (interleaved) {
    const float a = v[2 * k], b = v[2 * k + 1];
    v[2 * k] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    v[2 * k + 1] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
  } else {
    const float a = v[k], b = v[k + half];
    v[k] = __fadd_rn(__fmul_rn(a, c), __fmul_rn(-b, s));
    v[k + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  }
}

__global__ void assembleMlaKernel(const float* kvb, const float* ckv, int64_t n, int heads, int nope, int rope,
                                  int dv, int lora, float* K, float* V) {
  const int dq = nope + rope, width = dq + dv;  // per head: its key, then its value
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n * heads * width) return;
  const int64_t t = i / (int64_t(heads) * width);
  const int h = int((i / width) % heads), j = int(i % width);
  const float* src = kvb + (t * heads + h) * (nope + dv);
  if (j < nope)
    K[(t * heads + h) * dq + j] = src[j];
  else if (j < dq)
    K[(t * heads + h) * dq + j] = ckv[t * (lora + rope) + lora + (j - nope)];
  else
    V[(t * heads + h) * dv + (j - dq)] = src[nope + (j - dq)];
}

__global__ void temperatureKernel(float* x, int64_t rows, int64_t cols, const int64_t* pos, float floor_scale,
                                  float attn_scale) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows * cols) return;
  const float p = float(pos[i / cols]);
  const float s = log1pf(floorf((p + 1.0f) / floor_scale)) * attn_scale + 1.0f;
  x[i] *= s;
}

// One block per query row.
__global__ void maskedSoftmaxKernel(float* scores, int64_t rows, int64_t keys, int heads, const int64_t* first,
                                    float scale, int window, int chunk, const float* sinks) {
  __shared__ float fpart[32];
  __shared__ double dpart[32];
  const int64_t matrix = blockIdx.x / rows, i = blockIdx.x % rows;
  const int h = int(matrix % heads);
  const int64_t p = first[matrix / heads] + i;  // the query's position = the index of its own key
  int64_t lo = 0;
  if (window > 0) lo = max(lo, p - window + 1);
  if (chunk > 0) lo = max(lo, p - p % chunk);
  float* row = scores + blockIdx.x * keys;
  float mx = -INFINITY;
  for (int64_t j = lo + threadIdx.x; j <= p; j += blockDim.x) mx = fmaxf(mx, row[j] * scale);
  mx = blockMax(mx, fpart);
  const float sink = sinks ? sinks[h] : 0.0f;
  if (sinks) mx = fmaxf(mx, sink);
  double sum = 0;
  for (int64_t j = lo + threadIdx.x; j <= p; j += blockDim.x) {
    const float e = expf(row[j] * scale - mx);
    row[j] = e;
    sum += e;
  }
  sum = blockSum(sum, dpart);
  if (sinks) sum += double(expf(sink - mx));
  const float inv = float(1.0 / sum);
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) row[j] = (j >= lo && j <= p) ? row[j] * inv : 0.0f;
}

__device__ float siluF(float x) { return x / (1.0f + expf(-x)); }

__global__ void swiGluKernel(const float* gu, int64_t m, int64_t inter, float* act) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= m * inter) return;
  const int64_t r = i / inter, c = i % inter;
  act[i] = siluF(gu[r * 2 * inter + c]) * gu[r * 2 * inter + inter + c];
}

__global__ void clampedSwiGluKernel(const float* gu, int64_t m, int64_t inter, float alpha, float limit, float* act) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= m * inter) return;
  const int64_t r = i / inter, c = i % inter;
  const float g = fminf(gu[r * 2 * inter + c], limit);
  const float u = fminf(fmaxf(gu[r * 2 * inter + inter + c], -limit), limit);
  const float glu = g * (1.0f / (1.0f + expf(-(g * alpha))));
  act[i] = (u + 1.0f) * glu;
}

__global__ void gatherKernel(const float* src, int64_t cols, const int32_t* rows, const float* sc, int64_t count,
                             float* dst) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= count * cols) return;
  const int64_t r = i / cols;
  const float v = src[int64_t(rows[r]) * cols + i % cols];
  dst[i] = sc ? v * sc[r] : v;
}

__global__ void combineKernel(const float* y, int64_t cols, const int32_t* slot, const int32_t* expert, const float* w,
                              int64_t tokens, int k, float* out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= tokens * cols) return;
  const int64_t t = i / cols, c = i % cols;
  float acc = 0.0f;
  int last = -1;
  for (int step = 0; step < k; ++step) {  // next larger expert id each step (k is small)
    int best = -1;
    for (int j = 0; j < k; ++j) {
      const int e = expert[t * k + j];
      if (e > last && (best < 0 || e < expert[t * k + best])) best = j;
    }
    if (best < 0) break;
    last = expert[t * k + best];
    const float v = y[int64_t(slot[t * k + best]) * cols + c];
    acc += w ? w[t * k + best] * v : v;
  }
  out[i] = acc;
}

__global__ void addSharedKernel(float* out, const float* shared, const float* gate, int64_t rows, int64_t cols) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows * cols) return;
  const float g = gate ? 1.0f / (1.0f + expf(-gate[i / cols])) : 1.0f;
  out[i] += gate ? g * shared[i] : shared[i];
}

__global__ void addScaledKernel(float* x, const float* y, int64_t count, float mult) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < count) x[i] += mult == 1.0f ? y[i] : y[i] * mult;
}

__global__ void scaleKernel(float* x, int64_t count, float f) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < count) x[i] *= f;
}

__global__ void divideKernel(float* x, int64_t count, float d) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < count) x[i] /= d;
}

__global__ void nllKernel(const float* logits, int64_t vocab, const int32_t* targets, double* nll) {
  __shared__ float fpart[32];
  __shared__ double dpart[32];
  const int32_t target = targets[blockIdx.x];
  if (target < 0) {
    if (threadIdx.x == 0) nll[blockIdx.x] = 0.0;
    return;
  }
  const float* l = logits + blockIdx.x * vocab;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) mx = fmaxf(mx, l[j]);
  mx = blockMax(mx, fpart);
  double sum = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) sum += double(expf(l[j] - mx));
  sum = blockSum(sum, dpart);
  if (threadIdx.x == 0) nll[blockIdx.x] = log(sum) + double(mx) - double(l[target]);
}

constexpr int kThreads = 256;

}  // namespace

void embedRows(const void* table, bool table_bf16, const int32_t* ids, int64_t n, int64_t hidden, float multiplier,
               float* out, cudaStream_t stream) {
  embedKernel<<<blocksFor(n * hidden, kThreads), kThreads, 0, stream>>>(table, table_bf16, ids, n, hidden,
                                                                         multiplier, out);
  checkLaunch("embedRows");
}

void rmsNormRows(const float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* weight, float eps, float* y,
                 int64_t y_stride, cudaStream_t stream) {
  if (rows == 0) return;
  rmsNormKernel<<<unsigned(rows), kThreads, 0, stream>>>(x, dim, x_stride, weight, eps, y, y_stride);
  checkLaunch("rmsNormRows");
}

void toBf16(const float* x, int64_t count, __nv_bfloat16* y, cudaStream_t stream) {
  if (count == 0) return;
  toBf16Kernel<<<blocksFor(count, kThreads), kThreads, 0, stream>>>(x, count, y);
  checkLaunch("toBf16");
}

void fromBf16(const __nv_bfloat16* x, int64_t count, float* y, cudaStream_t stream) {
  if (count == 0) return;
  fromBf16Kernel<<<blocksFor(count, kThreads), kThreads, 0, stream>>>(x, count, y);
  checkLaunch("fromBf16");
}

void fromBf16Strided(const __nv_bfloat16* x, int64_t rows, int64_t cols, float* y, int64_t ldy, cudaStream_t stream) {
  if (rows * cols == 0) return;
  fromBf16StridedKernel<<<blocksFor(rows * cols, kThreads), kThreads, 0, stream>>>(x, rows, cols, y, ldy);
  checkLaunch("fromBf16Strided");
}

void addBias(float* y, int64_t rows, int64_t cols, const float* bias, cudaStream_t stream) {
  if (rows * cols == 0) return;
  addBiasKernel<<<blocksFor(rows * cols, kThreads), kThreads, 0, stream>>>(y, rows, cols, bias);
  checkLaunch("addBias");
}

void clampValues(float* x, int64_t count, float limit, cudaStream_t stream) {
  if (count == 0) return;
  clampKernel<<<blocksFor(count, kThreads), kThreads, 0, stream>>>(x, count, limit);
  checkLaunch("clampValues");
}

void applyRope(float* x, int64_t rows, int heads, int64_t head_stride, int64_t row_stride, const int64_t* positions,
               const float* cos, const float* sin, int half, bool interleaved, cudaStream_t stream) {
  const int64_t count = rows * heads * half;
  if (count == 0) return;
  ropeKernel<<<blocksFor(count, kThreads), kThreads, 0, stream>>>(x, rows, heads, head_stride, row_stride, positions,
                                                                  cos, sin, half, interleaved);
  checkLaunch("applyRope");
}

void assembleMla(const float* kvb, const float* ckv, int64_t n, int heads, int nope, int rope, int dv, int lora,
                 float* K, float* V, cudaStream_t stream) {
  const int64_t count = n * heads * (nope + rope + dv);
  if (count == 0) return;
  assembleMlaKernel<<<blocksFor(count, kThreads), kThreads, 0, stream>>>(kvb, ckv, n, heads, nope, rope, dv, lora, K, V);
  checkLaunch("assembleMla");
}

void temperatureTuning(float* x, int64_t rows, int64_t cols, const int64_t* positions, float floor_scale,
                       float attn_scale, cudaStream_t stream) {
  if (rows * cols == 0) return;
  temperatureKernel<<<blocksFor(rows * cols, kThreads), kThreads, 0, stream>>>(x, rows, cols, positions, floor_scale,
                                                                               attn_scale);
  checkLaunch("temperatureTuning");
}

void maskedSoftmax(float* scores, int64_t count, int64_t rows, int64_t keys, int heads, const int64_t* first_position,
                   float scale, int sliding_window, int chunk, const float* sinks, cudaStream_t stream) {
  if (count * rows == 0) return;
  const int threads = keys >= 1024 ? 512 : keys >= 256 ? 256 : 128;
  maskedSoftmaxKernel<<<unsigned(count * rows), threads, 0, stream>>>(scores, rows, keys, heads, first_position, scale,
                                                                     sliding_window, chunk, sinks);
  checkLaunch("maskedSoftmax");
}

void swiGlu(const float* gate_up, int64_t m, int64_t inter, float* act, cudaStream_t stream) {
  if (m * inter == 0) return;
  swiGluKernel<<<blocksFor(m * inter, kThreads), kThreads, 0, stream>>>(gate_up, m, inter, act);
  checkLaunch("swiGlu");
}

void clampedSwiGlu(const float* gate_up, int64_t m, int64_t inter, float alpha, float limit, float* act,
                   cudaStream_t stream) {
  if (m * inter == 0) return;
  clampedSwiGluKernel<<<blocksFor(m * inter, kThreads), kThreads, 0, stream>>>(gate_up, m, inter, alpha, limit, act);
  checkLaunch("clampedSwiGlu");
}

void gatherRows(const float* src, int64_t cols, const int32_t* rows, const float* scale, int64_t count, float* dst,
                cudaStream_t stream) {
  if (count * cols == 0) return;
  gatherKernel<<<blocksFor(count * cols, kThreads), kThreads, 0, stream>>>(src, cols, rows, scale, count, dst);
  checkLaunch("gatherRows");
}

void combineExperts(const float* y, int64_t cols, const int32_t* slot, const int32_t* expert, const float* w,
                    int64_t tokens, int k, float* out, cudaStream_t stream) {
  if (tokens * cols == 0) return;
  combineKernel<<<blocksFor(tokens * cols, kThreads), kThreads, 0, stream>>>(y, cols, slot, expert, w, tokens, k, out);
  checkLaunch("combineExperts");
}

void addShared(float* out, const float* shared, const float* gate, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  addSharedKernel<<<blocksFor(rows * cols, kThreads), kThreads, 0, stream>>>(out, shared, gate, rows, cols);
  checkLaunch("addShared");
}

void addScaled(float* x, const float* y, int64_t count, float multiplier, cudaStream_t stream) {
  if (count == 0) return;
  addScaledKernel<<<blocksFor(count, kThreads), kThreads, 0, stream>>>(x, y, count, multiplier);
  checkLaunch("addScaled");
}

void scale(float* x, int64_t count, float factor, cudaStream_t stream) {
  if (count == 0) return;
  scaleKernel<<<blocksFor(count, kThreads), kThreads, 0, stream>>>(x, count, factor);
  checkLaunch("scale");
}

void divide(float* x, int64_t count, float divisor, cudaStream_t stream) {
  if (count == 0) return;
  divideKernel<<<blocksFor(count, kThreads), kThreads, 0, stream>>>(x, count, divisor);
  checkLaunch("divide");
}

void tokenNll(const float* logits, int64_t rows, int64_t vocab, const int32_t* targets, double* nll,
              cudaStream_t stream) {
  if (rows == 0) return;
  nllKernel<<<unsigned(rows), kThreads, 0, stream>>>(logits, vocab, targets, nll);
  checkLaunch("tokenNll");
}

}  // namespace moewb::gpu::engine_kernels

namespace moewb::gpu::engine_kernels {
namespace {

// Score of expert e as the CPU router computes it (softmax: float exp summed in float64, then divided).
__device__ float routerScore(const float* l, int e, DeviceRouter router, float mx, double sum) {
  if (router == DeviceRouter::SoftmaxTopK) return float(double(expf(l[e] - mx)) / sum);
  return l[e];
}

__global__ void routeTopKKernel(const float* logits, int64_t n, int E, int k, DeviceRouter router, bool normalize,
                                int32_t* chosen, float* weights, int32_t* counts) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= n) return;
  const float* l = logits + t * E;
  float mx = -INFINITY;
  double sum = 0;
  if (router == DeviceRouter::SoftmaxTopK) {
    for (int e = 0; e < E; ++e) mx = fmaxf(mx, l[e]);
    for (int e = 0; e < E; ++e) sum += double(expf(l[e] - mx));
  }
  // k passes: the best (value, lower index) pair ranked after the previous one.
  float prev_v = INFINITY;
  int prev_e = -1;
  int32_t* idx = chosen + t * k;
  float* w = weights + t * k;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    float best_v = 0;
    for (int e = 0; e < E; ++e) {
      const float v = routerScore(l, e, router, mx, sum);
      const bool after = v < prev_v || (v == prev_v && e > prev_e);
      if (after && (best < 0 || v > best_v)) best = e, best_v = v;
    }
    idx[j] = best;
    w[j] = best_v;
    prev_v = best_v;
    prev_e = best;
  }
  if (router == DeviceRouter::SoftmaxTopK) {
    if (normalize) {
      float wsum = 0;
      for (int j = 0; j < k; ++j) wsum += w[j];
      for (int j = 0; j < k; ++j) w[j] /= wsum;
    }
  } else if (router == DeviceRouter::TopKSigmoid) {
    for (int j = 0; j < k; ++j) w[j] = 1.0f / (1.0f + expf(-w[j]));
  } else {
    const float top = w[0];
    double s = 0;
    for (int j = 0; j < k; ++j) {
      w[j] = expf(w[j] - top);
      s += w[j];
    }
    for (int j = 0; j < k; ++j) w[j] = float(w[j] / s);
  }
  for (int j = 0; j < k; ++j) atomicAdd(counts + idx[j], 1);
}

__global__ void prefixKernel(const int32_t* counts, int E, int pad, int32_t* start, int32_t* fill) {
  if (threadIdx.x != 0) return;
  int32_t acc = 0;
  for (int e = 0; e < E; ++e) {
    start[e] = acc;
    fill[e] = acc;
    acc += int32_t(paddedRows(counts[e], pad));
  }
  start[E] = acc;
}

__global__ void scatterPairsKernel(const int32_t* chosen, const float* weights, int64_t pairs, int k, int32_t* fill,
                                   int32_t* perm, int32_t* slot, float* scale) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= pairs) return;
  const int32_t r = atomicAdd(fill + chosen[i], 1);
  perm[r] = int32_t(i / k);
  slot[i] = r;
  scale[r] = weights[i];
}

}  // namespace

void routeTopK(const float* logits, int64_t n, int experts, int k, DeviceRouter router, bool normalize,
               int32_t* chosen, float* weights, int32_t* counts, cudaStream_t stream) {
  if (n == 0) return;
  routeTopKKernel<<<blocksFor(n, 128), 128, 0, stream>>>(logits, n, experts, k, router, normalize, chosen, weights,
                                                         counts);
  checkLaunch("routeTopK");
}

void sortPairsByExpert(const int32_t* chosen, const float* weights, int64_t n, int experts, int k,
                       const int32_t* counts, int pad, int32_t* start, int32_t* fill, int32_t* perm, int32_t* slot,
                       float* pair_scale, cudaStream_t stream) {
  prefixKernel<<<1, 32, 0, stream>>>(counts, experts, pad, start, fill);
  checkLaunch("sortPairsByExpert (prefix)");
  if (n == 0) return;
  scatterPairsKernel<<<blocksFor(n * k, kThreads), kThreads, 0, stream>>>(chosen, weights, n * k, k, fill, perm, slot,
                                                                          pair_scale);
  checkLaunch("sortPairsByExpert (scatter)");
}

}  // namespace moewb::gpu::engine_kernels

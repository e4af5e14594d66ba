// SPDX-License-Identifier: MIT
#pragma once
// The element-wise and row-wise kernels of the device engine (everything but the GEMMs, which are cuBLAS).
// Activations are float32 row-major; each function launches on `stream` and throws moewb::Error naming
// the kernel when the launch fails. They mirror the CPU engine's kernels (core/src/engine/kernels.cpp,
// engine.cpp, experts.cpp) operation for operation, so the two paths agree to float rounding.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace moewb::gpu::engine_kernels {

// out[t, :] = table[ids[t], :] * multiplier; the table in float32 or bf16.
void embedRows(const void* table, bool table_bf16, const int32_t* ids, int64_t n, int64_t hidden, float multiplier,
               float* out, cudaStream_t stream);

// HF RMSNorm per row: float64 sum of squares, float32 variance, x * rsqrt(var + eps) * weight (weight
// nullptr: ones). In place allowed (y == x with the same strides).
void rmsNormRows(const float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* weight, float eps, float* y,
                 int64_t y_stride, cudaStream_t stream);

void toBf16(const float* x, int64_t count, __nv_bfloat16* y, cudaStream_t stream);
void fromBf16(const __nv_bfloat16* x, int64_t count, float* y, cudaStream_t stream);
// y[r * ldy + c] = x[r * cols + c] for a [rows, cols] bf16 block (a GEMM's output into columns of a wider
// float32 matrix).
void fromBf16Strided(const __nv_bfloat16* x, int64_t rows, int64_t cols, float* y, int64_t ldy, cudaStream_t stream);

// y[r, c] += bias[c]
void addBias(float* y, int64_t rows, int64_t cols, const float* bias, cudaStream_t stream);
// x = clamp(x, -limit, limit)
void clampValues(float* x, int64_t count, float limit, cudaStream_t stream);

// Rotates the first 2*half dims of `heads` head vectors of each of `rows` tokens (row t at
// x + t*row_stride, head h at + h*head_stride) by the angle of positions[t]: cos/sin tables [positions,
// half] (row p = position p); halves (i, i+half) or interleaved pairs (2i, 2i+1).
void applyRope(float* x, int64_t rows, int heads, int64_t head_stride, int64_t row_stride, const int64_t* positions,
               const float* cos, const float* sin, int half, bool interleaved, cudaStream_t stream);

// MLA: K[t, h] = [kvb[t, h, :nope], k_pe[t]] with k_pe = ckv[t, lora : lora + rope] (shared by the heads),
// V[t, h] = kvb[t, h, nope:]; kvb [n, heads * (nope + dv)], ckv [n, lora + rope].
void assembleMla(const float* kvb, const float* ckv, int64_t n, int heads, int nope, int rope, int dv, int lora,
                 float* K, float* V, cudaStream_t stream);

// Llama 4 NoPE layers: row t of x [rows, cols] times log1p(floor((p + 1) / floor_scale)) * attn_scale + 1.
void temperatureTuning(float* x, int64_t rows, int64_t cols, const int64_t* positions, float floor_scale,
                       float attn_scale, cudaStream_t stream);

// Attention probabilities in place: `count` score matrices [rows, keys] (query-major, consecutive). Matrix b
// is head b % heads of the sequence b / heads of the group; its queries sit at positions first_position[b /
// heads] + i. Keys j in [lo, p] stay visible (lo from the sliding window / chunk as the CPU engine's
// firstVisibleKey), the rest become 0. sinks (per head) or nullptr.
void maskedSoftmax(float* scores, int64_t count, int64_t rows, int64_t keys, int heads, const int64_t* first_position,
                   float scale, int sliding_window, int chunk, const float* sinks, cudaStream_t stream);

// act[m, I] = silu(gu[:, :I]) * gu[:, I:] (SwiGLU), or gpt-oss's clamped variant.
void swiGlu(const float* gate_up, int64_t m, int64_t inter, float* act, cudaStream_t stream);
void clampedSwiGlu(const float* gate_up, int64_t m, int64_t inter, float alpha, float limit, float* act,
                   cudaStream_t stream);

// dst[r, :] = src[rows[r], :] * (scale ? scale[r] : 1)
void gatherRows(const float* src, int64_t cols, const int32_t* rows, const float* scale, int64_t count, float* dst,
                cudaStream_t stream);
// out[t, :] = sum over j of w[t*k+j] * y[slot[t*k+j], :] in ascending expert order (expert[t*k+j]), the
// CPU engine's order of addition; w nullptr: weights of 1 (applied to the inputs instead).
void combineExperts(const float* y, int64_t cols, const int32_t* slot, const int32_t* expert, const float* w,
                    int64_t tokens, int k, float* out, cudaStream_t stream);
// out[t, :] += sigmoid(gate[t]) * shared[t, :]   (gate nullptr: += shared)
void addShared(float* out, const float* shared, const float* gate, int64_t rows, int64_t cols, cudaStream_t stream);
// x += y * multiplier
void addScaled(float* x, const float* y, int64_t count, float multiplier, cudaStream_t stream);
// x *= factor
void scale(float* x, int64_t count, float factor, cudaStream_t stream);
// x /= divisor (Granite's logits: a division, as HF)
void divide(float* x, int64_t count, float divisor, cudaStream_t stream);

// nll[r] = log(sum exp(l - max)) + max - l[target[r]] (float32 exponentials summed in float64, as the CPU
// observer), 0 where target[r] < 0.
void tokenNll(const float* logits, int64_t rows, int64_t vocab, const int32_t* targets, double* nll,
              cudaStream_t stream);

}  // namespace moewb::gpu::engine_kernels

namespace moewb::gpu::engine_kernels {

// The routers whose choice depends on one token's logits only, on the device with the CPU engine's
// arithmetic (core/src/engine/routing.cpp): softmax over all experts then top-k (optionally renormalised),
// top-k of the logits then a softmax over the k (or a sigmoid of each). Ties go to the lower expert index.
enum class DeviceRouter { SoftmaxTopK, TopKSoftmax, TopKSigmoid };
// chosen/weights [n, k]; counts[E] (zeroed by the caller) += tokens per expert.
void routeTopK(const float* logits, int64_t n, int experts, int k, DeviceRouter router, bool normalize,
               int32_t* chosen, float* weights, int32_t* counts, cudaStream_t stream);
// Rows an expert's GEMM runs on for m tokens: m rounded up to a multiple of `pad` (1: no padding). Padding
// keeps the number of distinct GEMM shapes small, so that cuBLAS chooses (and loads) its kernels once per
// shape instead of for every token count the routing happens to produce.
__host__ __device__ inline int64_t paddedRows(int64_t m, int pad) {
  return (m + pad - 1) / pad * pad;
}
// Pairs (token, j) sorted by expert: start[E + 1] = exclusive prefix of the padded counts, then for every
// pair a row r in its expert's range: perm[r] = token, slot[t * k + j] = r, pair_scale[r] = weights[t * k
// + j]. Rows within an expert come in any order (each is its own GEMM row); padding rows keep what perm
// held (set it to 0 first). `fill` [E] is scratch.
void sortPairsByExpert(const int32_t* chosen, const float* weights, int64_t n, int experts, int k,
                       const int32_t* counts, int pad, int32_t* start, int32_t* fill, int32_t* perm, int32_t* slot,
                       float* pair_scale, cudaStream_t stream);

}  // namespace moewb::gpu::engine_kernels

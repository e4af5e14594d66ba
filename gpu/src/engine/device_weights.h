// SPDX-License-Identifier: MIT
#pragma once
// The device engine's weights: each matrix uploaded once from the WeightProvider and kept resident (bf16
// or float32) until the memory limit forces the least recently used ones out. Entries used in the current
// step (one layer) are never dropped, so a step whose weights exceed the limit still runs.
#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "device_memory.h"
#include "moewb/engine/weight_provider.h"
#include "moewb/gpu/w3a16.h"

namespace moewb::gpu::device_engine {

// A weight [rows, cols] row-major (HF Linear [out, in]) on the device, with its bias when it has one; or,
// for a matrix stored as 3-bit groups of 64 (RTN, HQQ, MiLo with INT3 compensators), its W3A16 kernel
// layout instead of dense values.
struct DeviceMatrix {
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  bool bf16 = false;
  const float* bias = nullptr;  // [rows] float32, or nullptr
  const W3A16Weights* int3 = nullptr;
  const LowRankCompensator* compensator = nullptr;  // with int3, or nullptr
};

class DeviceWeightStore {
 public:
  DeviceWeightStore(bool bf16, cudaStream_t stream) : bf16_(bf16), stream_(stream) {}

  // Drops everything when the engine's weights changed (another variant).
  void useProvider(const void* provider_identity);
  void setLimit(uint64_t bytes) { limit_ = bytes; }
  uint64_t limit() const { return limit_; }
  void setStream(cudaStream_t stream) { stream_ = stream; }
  // Entries used from now on belong to a new step; older ones may be dropped.
  void beginStep() { ++step_; }

  // Matrix `name` [rows, cols] (-1: unchecked); `bias_name` empty or a vector [rows].
  const DeviceMatrix& matrix(const engine::WeightProvider& w, const std::string& name, int64_t rows, int64_t cols,
                             const std::string& bias_name = {});
  // The row blocks of several matrices stacked into one ([gate; up] of an expert), under `key`.
  const DeviceMatrix& stacked(const engine::WeightProvider& w, const std::string& key,
                              const std::vector<std::string>& names, int64_t rows_each, int64_t cols);
  // A host-prepared matrix (gpt-oss's de-interleaved gate/up) under `key`, built by `make` on first use.
  template <typename Make>
  const DeviceMatrix& prepared(const std::string& key, Make&& make) {
    if (auto* hit = lookup(key)) return *hit;
    MatrixRM m;
    std::vector<float> bias;
    make(m, bias);
    return insert(key, m.data(), m.rows(), m.cols(), bias.empty() ? nullptr : bias.data());
  }
  // A float32 vector (norm weights, biases).
  const float* vector(const engine::WeightProvider& w, const std::string& name, int64_t length);

  // Whether matrix() gives the W3A16 kernel layout of matrices with a 3-bit stored form (bf16 mode).
  void setNativeInt3(bool on) { native_int3_ = on; }
  int64_t nativeInt3Matrices() const { return native_int3_count_; }
  int64_t dequantizedMatrices() const { return dequantized_count_; }
  // Why the first stored form that could not run natively was dequantized instead ("" when none was).
  const std::string& dequantizedReason() const { return dequantized_reason_; }

  uint64_t residentBytes() const { return resident_; }
  uint64_t uploadedBytes() const { return uploaded_; }
  uint64_t evictedBytes() const { return evicted_; }

 private:
  struct Entry {
    DeviceBuffer data, bias;
    DeviceBuffer packed, scales, zero_bias, u_packed, u_scales, v_packed, v_scales;  // W3A16 layout
    W3A16Weights int3;
    LowRankCompensator compensator;
    DeviceMatrix view;
    uint64_t step = 0;
    std::list<std::string>::iterator lru;
  };
  // A block of rows of a matrix being uploaded: float32 from the provider, or the checkpoint's own bf16
  // bytes (a plain 2-D bf16 tensor read straight from the mapped file: no conversion on the host, half the
  // bytes over PCIe).
  struct Rows {
    const float* f32 = nullptr;
    std::span<const std::byte> bf16;
    int64_t rows = 0, cols = 0;
    MatrixRM keep;  // owns f32 when it came from the provider
  };
  Rows read(const engine::WeightProvider& w, const std::string& name, int64_t rows, int64_t cols);
  const DeviceMatrix* lookup(const std::string& key);
  const DeviceMatrix& insert(const std::string& key, std::vector<Rows>& parts, int64_t cols, const float* host_bias);
  const DeviceMatrix& insert(const std::string& key, const float* host, int64_t rows, int64_t cols,
                             const float* host_bias);
  void makeRoom(uint64_t bytes);
  // The W3A16 entry of a stored form, or nullptr (and why) when the kernel cannot run it.
  const DeviceMatrix* insertInt3(const std::string& key, const quant::QuantizedMatrix& q, std::string* why);

  bool bf16_;
  cudaStream_t stream_;
  const void* provider_ = nullptr;
  uint64_t limit_ = 0, step_ = 0, resident_ = 0, uploaded_ = 0, evicted_ = 0;
  bool native_int3_ = false;
  int64_t native_int3_count_ = 0, dequantized_count_ = 0;
  std::string dequantized_reason_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // most recently used first
  DeviceBuffer staging_;        // upload staging for conversions between float32 and bf16
};

}  // namespace moewb::gpu::device_engine

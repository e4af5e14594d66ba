// SPDX-License-Identifier: MIT
#pragma once
// The engine on the GPU: an engine::ForwardBackend that runs whole forward passes on the device. Weights
// stay resident on the GPU between passes (bf16, or float32 in the exactness mode) up to a memory limit,
// beyond which layers are uploaded as they are needed and the least recently used ones dropped;
// activations are float32 with bf16 GEMM inputs (fp32 accumulation) or float32 throughout. Routing uses
// the CPU engine's router code on the router logits, so both paths choose experts the same way; the
// tokens of each expert are gathered and run through that expert's GEMMs; perplexity is reduced on the
// device (ForwardObserver::targets). In bf16 mode a compressed variant's 3-bit matrices run through the
// W3A16 kernel from their stored form (no dense copy on the device). Hooks the CPU engine has (KV-cache formats, K/V and attention
// observers, calibration taps) see the same data, copied to the host.
//   auto gpu = gpu::DeviceEngine::create({}, &why);   // nullptr + why without a GPU
//   engine->setForwardBackend(gpu);
#include <cstdint>
#include <memory>
#include <string>

#include "moewb/engine/engine.h"
#include "moewb/engine/forward_backend.h"

namespace moewb::gpu {

struct DeviceEngineOptions {
  // bf16: weights and GEMM inputs in bf16, fp32 accumulation and activations (the fast mode). fp32: float32
  // throughout without TF32 (compare with the CPU engine).
  enum class Precision { Bf16, Fp32 } precision = Precision::Bf16;
  // Bytes of GPU memory the engine may use for weights, activations and KV caches; 0: the free memory
  // less a margin. Weights beyond it are streamed layer by layer.
  uint64_t memory_limit = 0;
};

struct DeviceEngineStats {
  uint64_t uploaded_weight_bytes = 0;  // host-to-device weight traffic so far
  uint64_t resident_weight_bytes = 0;  // weights held now
  uint64_t evicted_weight_bytes = 0;   // dropped to stay under the memory limit (streaming)
  uint64_t peak_scratch_bytes = 0;     // activations and attention scores
  int64_t passes = 0;
  // Compressed variants (3-bit groups of 64, MiLo's INT3 compensators) run by the W3A16 kernel, and
  // stored forms it cannot run, dequantized on load instead (the first one named with its reason).
  int64_t native_int3_matrices = 0, dequantized_matrices = 0;
  std::string dequantized_reason;
};

class DeviceEngine final : public engine::ForwardBackend {
 public:
  static std::shared_ptr<DeviceEngine> create(const DeviceEngineOptions& options, std::string* why);
  ~DeviceEngine() override;

  std::string name() const override { return "cuda"; }
  std::string unsupported(const engine::MoeEngine& engine, const engine::ForwardObserver& observer) const override;
  engine::ForwardStats forward(const engine::MoeEngine& engine, const engine::SequenceBatch& batch,
                               engine::ForwardObserver& observer, engine::DecodeState* state,
                               ProgressReporter* progress, double progress_begin, double progress_span) override;
  std::unique_ptr<engine::DecodeState> newDecodeState(const engine::MoeEngine& engine, int sequences) override;
  void prepare(const engine::MoeEngine& engine, const engine::SequenceBatch* typical) override;

  // "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)"
  const std::string& deviceDescription() const;
  const DeviceEngineOptions& options() const;
  DeviceEngineStats stats() const;

  struct Impl;

 private:
  explicit DeviceEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace moewb::gpu

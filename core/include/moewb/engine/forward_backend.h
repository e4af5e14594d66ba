// SPDX-License-Identifier: MIT
#pragma once
// The engine's seam at the level of whole forward passes: a ForwardBackend runs every layer of a pass
// somewhere else than the CPU engine (the CUDA engine of gpu/, whose weights, activations and KV cache
// live on the device), behind MoeEngine's own interface, so eval, freq, kv, calibration and generation do
// not know where they run. The CPU engine stays the reference every backend is tested against.
#include <cstdint>
#include <memory>
#include <string>

#include "moewb/progress.h"

namespace moewb::engine {

class MoeEngine;
class ForwardObserver;
struct SequenceBatch;
struct ForwardStats;

// The keys and values of the tokens each sequence of a generation has seen so far (its KV cache), kept
// between forward passes so that the next pass runs only the new tokens (MoeEngine::extend). Made by
// MoeEngine::newDecodeState: by the engine's forward backend when it has one, so that the cache lives
// where the pass runs; a state is used only with the engine (and backend) that made it.
class DecodeState {
 public:
  virtual ~DecodeState() = default;
  virtual int sequences() const = 0;
  virtual int64_t length(int sequence) const = 0;  // tokens seen by sequence `sequence`
  virtual uint64_t bytes() const = 0;              // memory the cache holds (host or device)
};

class ForwardBackend {
 public:
  virtual ~ForwardBackend() = default;
  // "cuda": what reports and the CLI's JSON show as the device.
  virtual std::string name() const = 0;
  // Empty when this backend runs passes of `engine` seen by `observer`; otherwise why not (the engine then
  // runs the pass on the CPU).
  virtual std::string unsupported(const MoeEngine& engine, const ForwardObserver& observer) const = 0;
  // MoeEngine::forward's contract (state == nullptr) and MoeEngine::extend's (state made by this backend's
  // newDecodeState). Failures throw moewb::Error naming the backend and the failing step.
  virtual ForwardStats forward(const MoeEngine& engine, const SequenceBatch& batch, ForwardObserver& observer,
                               DecodeState* state, ProgressReporter* progress, double progress_begin,
                               double progress_span) = 0;
  virtual std::unique_ptr<DecodeState> newDecodeState(const MoeEngine& engine, int sequences) = 0;
  // Loads what the backend keeps between passes (the weights, on the GPU) before a timed run, so that its
  // cost is reported apart from the throughput, and runs `typical` (when given: a batch of the run's shape)
  // once so that the device's one-time costs (kernels loaded on first use, GEMM algorithm choices) are paid
  // before the clock starts too — what a warm-up pass does in PyTorch benchmarks.
  virtual void prepare(const MoeEngine& /*engine*/, const SequenceBatch* /*typical*/) {}
};

}  // namespace moewb::engine

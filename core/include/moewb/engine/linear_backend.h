// SPDX-License-Identifier: MIT
#pragma once
// The seam through which the engine's weight GEMMs can run elsewhere (the cuBLAS backend in gpu/).
// Every multiplication by a weight matrix in the engine goes through engine::linear() (kernels.h); that
// function hands the work to the backend installed for the calling thread, or computes it on the CPU.
#include <cstdint>
#include <string>

#include "moewb/catalog.h"

namespace moewb::engine {

class LinearBackend {
 public:
  virtual ~LinearBackend() = default;
  // y[n, out] = x[n, in] * w[out, in]^T (+ bias[out]), float32, the contract of engine::linear().
  // Implementations must not call engine::linear() (it would dispatch back to them); to leave a call on
  // the CPU they call cpuLinear(). Failures throw moewb::Error naming the backend and the failing step.
  virtual void linear(const float* x, int64_t n, const MatrixRM& w, const float* bias, float* y) = 0;
  // "cpu", "cuda", ...: what reports and the CLI's JSON show as the device.
  virtual std::string name() const = 0;
};

// The engine's CPU implementation (Eigen, rows over the worker threads), whatever backend is installed.
void cpuLinear(const float* x, int64_t n, const MatrixRM& w, const float* bias, float* y);

// The backend engine::linear() uses on this thread (nullptr: the CPU).
LinearBackend* currentLinearBackend();

// Installs a backend for the calling thread for the lifetime of the scope and restores the previous one
// after it. Per thread, not global: a GUI worker thread's forward pass on the GPU must not move another
// thread's engine (or a test running beside it) onto the GPU. Nests; nullptr selects the CPU.
class ScopedLinearBackend {
 public:
  explicit ScopedLinearBackend(LinearBackend* backend);
  ~ScopedLinearBackend();
  ScopedLinearBackend(const ScopedLinearBackend&) = delete;
  ScopedLinearBackend& operator=(const ScopedLinearBackend&) = delete;

 private:
  LinearBackend* previous_;
};

}  // namespace moewb::engine

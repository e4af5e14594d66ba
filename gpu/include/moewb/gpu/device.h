// SPDX-License-Identifier: MIT
#pragma once
// Plain C++ view of the GPU: no CUDA types, so core/, the CLI and the tests can include it whether or
// not they are compiled by nvcc. Streams are passed as an opaque pointer (a cudaStream_t).
#include <cstdint>
#include <string>

namespace moewb::gpu {

// Result of a GPU entry point. `code` is the cudaError_t / cublasStatus_t / cusolverStatus_t value
// (0 on success); `message` names the failing call, the file and the line.
struct Status {
  int code = 0;
  std::string message;
  bool ok() const { return code == 0; }
  static Status success() { return {}; }
  static Status failure(int code, std::string message) { return {code == 0 ? -1 : code, std::move(message)}; }
  // The code of work that stopped because its progress callback asked it to (no error of the GPU's).
  static constexpr int kCancelledCode = -130;
  bool cancelled() const { return code == kCancelledCode; }
  static Status cancelledDuring(const std::string& stage) { return {kCancelledCode, "cancelled during " + stage}; }
};

// True when a CUDA device can be used. Otherwise `why` (when given) says why: no device, a driver older
// than the toolkit ("driver version is insufficient"), no driver at all. Never aborts; the answer is
// computed once per process.
bool deviceAvailable(std::string* why = nullptr);

struct DeviceInfo {
  std::string name;
  int major = 0, minor = 0;
  int multiprocessors = 0;
  int64_t global_memory_bytes = 0;
  int64_t l2_bytes = 0;
  int runtime_version = 0, driver_version = 0;
};
// Fills `info` for the current device; fails (with the reason) where deviceAvailable() is false.
Status deviceInfo(DeviceInfo* info);

// Opaque stream handle: nullptr is the legacy default stream.
using Stream = void*;

}  // namespace moewb::gpu

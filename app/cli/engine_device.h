// SPDX-License-Identifier: MIT
#pragma once
// `--device auto|cpu|cuda` (and `--tf32`) of the commands that run the inference engine (eval, freq, kv):
// where the engine's weight GEMMs run. auto is the GPU when this build has CUDA and a device is present.
#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "moewb/engine/engine.h"

namespace moewb::cli {

struct EngineDeviceArgs {
  std::string device = "auto";
  bool tf32 = false;
  std::string gpu_precision = "bf16";  // the device engine's mode: bf16 (fast) or fp32 (exact)
  std::string gpu_memory;              // --gpu-memory: a byte size ("8GB"); empty: free memory less a margin
};

// Adds --device, --gpu-precision, --gpu-memory and --tf32 to `cmd`.
void addEngineDeviceOptions(CLI::App& cmd, EngineDeviceArgs& args);

// Where an engine's GEMMs run, once chosen.
struct EngineDevice {
  std::string device = "cpu";   // what ran: "cpu" or "cuda"
  std::string description;      // the GPU ("NVIDIA H100 ... (sm_90, 79.1 GiB)") or "CPU, 16 worker threads"
  std::string fallback_reason;  // why the GPU was not used where one was asked for or probed (auto)
  bool tf32 = false;
  std::string gpu_precision;  // "bf16" or "fp32" on cuda
  std::shared_ptr<engine::LinearBackend> backend;           // GEMMs of passes the device engine cannot run
  std::shared_ptr<engine::ForwardBackend> forward_backend;  // whole passes on the GPU; nullptr: the CPU
  // {"device","device_name", and for cuda "gpu_precision","gpu_memory_limit","weights_uploaded_bytes",...}:
  // call after the run. `engine` (optional) adds why a pass ran on the CPU after all.
  nlohmann::json toJson(const engine::MoeEngine* engine = nullptr) const;
  // "cuda (NVIDIA H100 ..., bf16)" / "cpu (16 threads)": for the text output.
  std::string summary() const;
};

// Chooses the device from the arguments and installs it on `engine`. When cuda is asked for and cannot be
// had (a build without CUDA, no usable GPU), prints one line on stderr naming `command` and the reason and
// runs on the CPU: a script that asks for the GPU still gets its numbers.
EngineDevice useEngineDevice(engine::MoeEngine& engine, const EngineDeviceArgs& args,
                             const std::string& command);

}  // namespace moewb::cli

// SPDX-License-Identifier: MIT
#pragma once
// The device engine's KV cache for generation: per layer and sequence, keys [capacity, kv_heads * key_dim]
// and values [capacity, kv_heads * value_dim] in float32 on the device, grown by doubling.
#include <cstdint>
#include <vector>

#include "device_memory.h"
#include "moewb/engine/forward_backend.h"

namespace moewb::gpu::device_engine {

class DeviceDecodeState final : public engine::DecodeState {
 public:
  DeviceDecodeState(const void* owner, int layers, int sequences, int64_t key_width, int64_t value_width)
      : owner(owner),
        key_width(key_width),
        value_width(value_width),
        lengths(static_cast<std::size_t>(sequences), 0),
        capacity(static_cast<std::size_t>(sequences), 0),
        keys(static_cast<std::size_t>(layers)),
        values(static_cast<std::size_t>(layers)) {
    for (int l = 0; l < layers; ++l) {
      keys[l].resize(static_cast<std::size_t>(sequences));
      values[l].resize(static_cast<std::size_t>(sequences));
    }
  }
  int sequences() const override { return static_cast<int>(lengths.size()); }
  int64_t length(int sequence) const override { return lengths.at(static_cast<std::size_t>(sequence)); }
  uint64_t bytes() const override {
    uint64_t b = 0;
    for (std::size_t l = 0; l < keys.size(); ++l)
      for (std::size_t s = 0; s < keys[l].size(); ++s) b += keys[l][s].bytes() + values[l][s].bytes();
    return b;
  }

  // Room for `tokens` tokens in sequence s of every layer, keeping what is cached.
  void reserve(int s, int64_t tokens, cudaStream_t stream) {
    if (tokens <= capacity[s]) return;
    const int64_t grown = std::max<int64_t>({tokens, 2 * capacity[s], 64});
    for (std::size_t l = 0; l < keys.size(); ++l) {
      for (auto* side : {&keys[l][s], &values[l][s]}) {
        const int64_t width = side == &keys[l][s] ? key_width : value_width;
        DeviceBuffer bigger(static_cast<std::size_t>(grown * width) * sizeof(float));
        if (lengths[s] > 0)
          cudaCheck(cudaMemcpyAsync(bigger.as(), side->as(), static_cast<std::size_t>(lengths[s] * width) * sizeof(float),
                                    cudaMemcpyDeviceToDevice, stream),
                    "growing the KV cache");
        cudaCheck(cudaStreamSynchronize(stream), "growing the KV cache");
        *side = std::move(bigger);
      }
    }
    capacity[s] = grown;
  }

  const void* owner;  // the DeviceEngine that made it
  int64_t key_width, value_width;
  std::vector<int64_t> lengths, capacity;
  std::vector<std::vector<DeviceBuffer>> keys, values;  // [layer][sequence]
};

}  // namespace moewb::gpu::device_engine

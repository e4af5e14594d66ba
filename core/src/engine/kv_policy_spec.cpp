// SPDX-License-Identifier: MIT
// From a KV spec to the engine's policy, and the report of any policy (moewb/engine/kv_cache.h).
#include <fmt/format.h>

#include "moewb/engine/kv_cache.h"
#include "moewb/error.h"
#include "moewb/methods/registry.h"

namespace moewb::engine {

std::shared_ptr<const KvCachePolicy> makeKvCachePolicy(std::string_view spec) {
  const std::size_t colon = spec.find(':');
  const methods::KvMethod* method = methods::MethodRegistry::instance().findKv(spec.substr(0, colon));
  if (method && method->choosesPerChunk())
    return method->makePolicy(spec, colon == std::string_view::npos ? std::string_view() : spec.substr(colon + 1));
  return std::make_shared<FixedKvCachePolicy>(methods::parseKvSpec(spec));
}

nlohmann::json kvCacheReport(const ModelConfig& config, const KvCachePolicy& policy, const KvCacheSize& measured,
                             int64_t length, int64_t context) {
  if (const auto* fixed = dynamic_cast<const FixedKvCachePolicy*>(&policy))
    return kvCacheReport(config, *fixed, measured, length, context);
  const methods::KvMethod& half = methods::MethodRegistry::instance().getKv("fp16", "KV cache");
  const methods::KvFormat fp16{&half, half.defaults()};
  const KvCacheSize fp16_length = kvCacheSize(config, fp16, policy.chunkTokens(), length);
  const KvCacheSize fp16_context = kvCacheSize(config, fp16, policy.chunkTokens(), context);
  const double bits = measured.averageBits();
  auto projected = [&](const KvCacheSize& like) {
    return static_cast<uint64_t>((bits * double(like.elements) + 7.0) / 8.0);
  };
  return {{"kv", policy.label()},
          {"kv_format", policy.label()},
          {"kv_chunk", policy.chunkTokens()},
          {"kv_avg_bits", bits},
          {"kv_bytes", projected(fp16_length)},
          {"kv_bytes_projected", true},
          {"kv_context", context},
          {"kv_bytes_at_context", projected(fp16_context)},
          {"kv_fp16_bytes_at_context", fp16_context.bytes()}};
}

}  // namespace moewb::engine

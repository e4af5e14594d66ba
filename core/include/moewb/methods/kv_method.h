// SPDX-License-Identifier: MIT
#pragma once
// KV-cache methods: the second kind of compression method in the MethodRegistry (moewb/methods/registry.h).
// A KV method says how one chunk of keys or values is stored: quantizeChunk simulates it (quantize, then
// dequantize in place: the engine's attention runs in float32 on what the cache would give back) and
// storedBits counts what the truly packed layout takes (codes + fp16 scales + fp16 zeros). The engine applies
// a method per (layer, chunk) through a KvCachePolicy (moewb/engine/kv_cache.h); docs/kv-cache.md describes
// the formats for users.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "moewb/methods/options.h"

namespace moewb::engine {
class KvCachePolicy;  // moewb/engine/kv_cache.h
}

namespace moewb::methods {

// The option values of a KV method, by option name (every option lives in `extra`).
struct KvSettings {
  std::string method = "fp16";  // a KV name in the method registry
  OptionValues extra;
};

enum class KvTensor : unsigned char { Keys, Values };

// One chunk of the cache of one layer and sequence: `tokens` rows of kv_heads x head_dim floats, row-major
// with `row_stride` floats between rows (element (t, h, d) at data[t * row_stride + h * head_dim + d]).
struct KvChunk {
  float* data = nullptr;
  int64_t tokens = 0;
  int kv_heads = 0, head_dim = 0;
  int64_t row_stride = 0;
  KvTensor tensor = KvTensor::Keys;
};

class KvMethod {
 public:
  virtual ~KvMethod() = default;
  virtual std::string_view name() const = 0;     // "int4": --kv, specs, reports
  virtual std::string_view title() const = 0;    // "INT4, keys per channel, values per token": lists
  virtual std::string_view summary() const = 0;  // one line for --help and docs
  virtual const std::vector<OptionSpec>& options() const = 0;
  // Checks the settings as a whole (options were checked one by one already); throws moewb::Error.
  virtual void validate(const KvSettings& /*settings*/) const {}
  // Tokens at the end of every sequence kept in fp16 whatever the policy chose (KIVI's residual window):
  // the engine stores each chunk that reaches into them in fp16. 0 for formats without one.
  virtual int64_t residualTokens(const KvSettings& /*settings*/) const { return 0; }
  // Simulates storing the chunk: every element is replaced by what the stored form gives back.
  virtual void quantizeChunk(const KvChunk& chunk, const KvSettings& settings) const = 0;
  // Bits the chunk takes in the packed layout (codes, scales and zeros; a chunk's codes are padded to a
  // whole byte).
  virtual int64_t storedBits(KvTensor tensor, int64_t tokens, int kv_heads, int head_dim,
                             const KvSettings& settings) const = 0;

  // A method that chooses a format per chunk itself (moqae: a trained router, moewb/methods/moqae.h) is
  // spelled `NAME:ARGUMENT` and builds its own policy (engine::makeKvCachePolicy); it is no format a chunk
  // can be stored in, so parseKvSpec refuses it. Plain formats return false / nullptr.
  virtual bool choosesPerChunk() const { return false; }
  virtual std::shared_ptr<const engine::KvCachePolicy> makePolicy(std::string_view /*spec*/,
                                                                  std::string_view /*argument*/) const {
    return nullptr;
  }

  const OptionSpec* option(std::string_view name) const;
  KvSettings defaults() const;  // every option at its default (method set)
};

// A method with its settings: what a policy assigns to a chunk.
struct KvFormat {
  const KvMethod* method = nullptr;
  KvSettings settings;
  // "int4:group=32": the method and every option that differs from its default.
  std::string label() const;
};

// A parsed KV quick spec (`moewb eval --kv SPEC`): the format and the cache's chunk length.
struct KvSpec {
  KvFormat format;
  int chunk_tokens = 32;  // N: the policy's unit along each sequence
  std::string text;       // the spec as given
};

// Grammar (parsed next to the weight specs, core/src/methods/spec.cpp):
//   spec  := NAME ['-g' GROUP] (':' KEY '=' VALUE)*
// NAME a KV method of the registry (fp16, int8, int4, int2, kivi-2, kivi-4), `-gGROUP` a spelling of
// `group=GROUP` ("int4-g32" = "int4:group=32"), KEY an option of the method or `chunk` (tokens per chunk,
// default 32). Throws moewb::Error quoting the spec and listing the known formats.
KvSpec parseKvSpec(std::string_view text);
// "fp16, int8, int4, int2, kivi-2, kivi-4 (options: int4-g32, int4:group=64, kivi-2:residual=64, :chunk=N)".
std::string kvSpecSyntax();

// Rounds to the nearest fp16 value (ties to even), saturating at +-65504, in double: the fp16 metadata
// (scales, zeros) of the integer formats.
double roundToHalf(double x);

}  // namespace moewb::methods

// SPDX-License-Identifier: MIT
#include "moewb/quant/payload.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>

#include "moewb/error.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/quant/payloads/codebook.h"
#include "moewb/quant/payloads/ternary_dictionary.h"

namespace moewb::quant {

namespace {

struct ReaderRegistry {
  std::mutex mutex;
  std::map<std::string, PayloadReader, std::less<>> readers;

  ReaderRegistry() {
    // The built-in payload kinds, listed once.
    readers.emplace(std::string(CodebookPayload::kKind), &readCodebookPayload);
    readers.emplace(std::string(TernaryDictionaryPayload::kKind), &readTernaryDictionaryPayload);
  }
};

ReaderRegistry& readerRegistry() {
  static ReaderRegistry registry;
  return registry;
}

}  // namespace

std::shared_ptr<const void> SharedPayloadObjects::getOrBuild(
    const std::string& name, std::type_index type,
    const std::function<std::shared_ptr<const void>()>& build) {
  std::lock_guard lock(mutex_);
  auto& slot = objects_[{name, type}];
  // Built under the lock: two matrices naming one dictionary must not build it twice.
  if (!slot) slot = build();
  return slot;
}

void PayloadSource::fail(const std::string& tensor, const std::string& what) const {
  throw Error(fmt::format("{}: {}", describe(tensor), what));
}

int64_t sharedPayloadBytes(const std::vector<QuantizedMatrix>& matrices) {
  std::set<const void*> seen;
  int64_t total = 0;
  for (const auto& q : matrices) {
    if (!q.payload) continue;
    for (const auto& part : q.payload->sharedParts())
      if (seen.insert(part.object.get()).second) total += part.bytes;
  }
  return total;
}

void registerPayloadReader(const std::string& kind, PayloadReader reader) {
  auto& r = readerRegistry();
  std::lock_guard lock(r.mutex);
  r.readers[kind] = std::move(reader);
}

const PayloadReader* findPayloadReader(std::string_view kind) {
  auto& r = readerRegistry();
  std::lock_guard lock(r.mutex);
  const auto it = r.readers.find(kind);
  return it == r.readers.end() ? nullptr : &it->second;
}

std::vector<std::string> payloadKinds() {
  auto& r = readerRegistry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> kinds;
  for (const auto& [k, v] : r.readers) kinds.push_back(k);
  return kinds;
}

std::shared_ptr<const MatrixPayload> readPayload(const PayloadSource& source, const std::string& key,
                                                 const nlohmann::json& entry) {
  const auto it = entry.find("payload");
  if (it == entry.end() || !it->is_string())
    throw Error(fmt::format("{}: its manifest entry names no payload kind", source.describe(key)));
  const std::string kind = it->get<std::string>();
  const PayloadReader* reader = findPayloadReader(kind);
  if (!reader)
    throw Error(fmt::format("{}: stored as payload kind '{}', which this build does not know (known: {})",
                            source.describe(key), kind, fmt::join(payloadKinds(), ", ")));
  auto payload = (*reader)(source, key, entry);
  if (!payload)
    throw Error(fmt::format("{}: the '{}' payload reader returned nothing", source.describe(key), kind));
  return payload;
}

int64_t packedWordCount(int64_t count, int bits) {
  const int64_t per_word = 32 / bits;
  return (count + per_word - 1) / per_word;
}

std::vector<uint32_t> packBits(std::span<const uint32_t> values, int bits) {
  if (bits < 1 || bits > 32) throw Error(fmt::format("packBits: {} bits per value (expected 1..32)", bits));
  const int64_t per_word = 32 / bits, n = int64_t(values.size());
  std::vector<uint32_t> out(std::size_t(packedWordCount(n, bits)), 0u);
  const uint32_t mask = bits == 32 ? ~0u : (1u << bits) - 1u;
  for (int64_t i = 0; i < n; ++i)
    out[std::size_t(i / per_word)] |= (values[std::size_t(i)] & mask) << (bits * (i % per_word));
  return out;
}

std::vector<uint32_t> unpackBits(std::span<const uint32_t> words, int64_t count, int bits) {
  if (bits < 1 || bits > 32) throw Error(fmt::format("unpackBits: {} bits per value (expected 1..32)", bits));
  if (int64_t(words.size()) < packedWordCount(count, bits))
    throw Error(fmt::format("{} words hold fewer than {} values of {} bits", words.size(), count, bits));
  const int64_t per_word = 32 / bits;
  const uint32_t mask = bits == 32 ? ~0u : (1u << bits) - 1u;
  std::vector<uint32_t> out(static_cast<std::size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    out[std::size_t(i)] = (words[std::size_t(i / per_word)] >> (bits * (i % per_word))) & mask;
  return out;
}

}  // namespace moewb::quant

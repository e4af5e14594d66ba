// SPDX-License-Identifier: MIT
#pragma once
// Stored forms of a quantized matrix other than grouped integer codes: codebook / product-quantized
// codes (QET, PQ), dictionary-coded ternary codes (QMoE), and whatever comes next. A MatrixPayload is
// what a QuantizedMatrix stores when its grouped fields are empty: it dequantizes itself, counts its
// bytes and writes its own tensors; an export names its kind ("payload": KIND in the manifest) and
// CompressedModel::read rebuilds it through the reader registered for that kind. Neither the exporter
// nor the engine names a kind (docs/export-format.md describes the built-in ones).
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeindex>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/dtype.h"

namespace moewb::quant {

struct QuantizedMatrix;

// Where a payload writes its tensors (the export's shards).
class PayloadWriter {
 public:
  virtual ~PayloadWriter() = default;
  // A tensor of `dtype` and `shape` whose bytes (tightly packed, little-endian) are `data`.
  virtual void addTensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                         std::span<const std::byte> data) = 0;
  // Float values stored as F16 (round to nearest even).
  virtual void addHalf(const std::string& name, std::vector<int64_t> shape,
                       std::span<const float> values) = 0;
  // An object shared by many matrices (a dictionary) is written once per export: the first call for
  // `identity` picks an unused name from `name_hint` ("moewb.shared.ternary_dictionary" ->
  // "moewb.shared.ternary_dictionary.0") and calls `write(writer, name)`, which adds its tensors under
  // that name; every call returns the name, which the matrices' manifest entries record. The manifest's
  // top-level "shared" object lists each such name with the bytes its tensors hold.
  using SharedWriteFn = std::function<void(PayloadWriter& writer, const std::string& name)>;
  virtual std::string sharedTensor(const void* identity, const std::string& name_hint,
                                   const SharedWriteFn& write) = 0;

  template <typename T>
  void addValues(const std::string& name, DType dtype, std::vector<int64_t> shape, const std::vector<T>& v) {
    addTensor(name, dtype, std::move(shape), std::as_bytes(std::span<const T>(v.data(), v.size())));
  }
};

// Objects a source rebuilt once and hands to every matrix that names them (a shared dictionary), by
// name and type. Thread-safe.
class SharedPayloadObjects {
 public:
  std::shared_ptr<const void> getOrBuild(const std::string& name, std::type_index type,
                                         const std::function<std::shared_ptr<const void>()>& build);

 private:
  std::mutex mutex_;
  std::map<std::pair<std::string, std::type_index>, std::shared_ptr<const void>> objects_;
};

// Where a payload reads its tensors from (an export's checkpoint). Every error names the file and the
// tensor and says what was expected (moewb::Error).
class PayloadSource {
 public:
  virtual ~PayloadSource() = default;
  virtual bool has(const std::string& tensor) const = 0;
  virtual DType dtype(const std::string& tensor) const = 0;  // throws when the tensor is missing
  virtual std::vector<int64_t> shape(const std::string& tensor) const = 0;
  // Raw bytes; valid while the source lives. Throws unless the tensor exists with `dtype`.
  virtual std::span<const std::byte> bytes(const std::string& tensor, DType dtype) const = 0;
  // Values of an F16/BF16/F32 tensor as float.
  virtual std::vector<float> floats(const std::string& tensor) const = 0;
  // "DIR/model.safetensors: tensor 'NAME'" (the file holding it, or the folder when it is missing).
  virtual std::string describe(const std::string& tensor) const = 0;
  // Shared objects of this source (one dictionary for all matrices that name it).
  virtual SharedPayloadObjects& sharedObjects() const = 0;

  [[noreturn]] void fail(const std::string& tensor, const std::string& what) const;
  // A tensor's elements as T (dtype checked, element count `count` when >= 0).
  template <typename T>
  std::vector<T> values(const std::string& tensor, DType dtype, int64_t count = -1) const {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto b = bytes(tensor, dtype);  // checks the dtype, whose size is sizeof(T)
    if (count >= 0 && int64_t(b.size() / sizeof(T)) != count)
      fail(tensor,
           "expected " + std::to_string(count) + " elements, found " + std::to_string(b.size() / sizeof(T)));
    std::vector<T> out(b.size() / sizeof(T));
    std::memcpy(out.data(), b.data(), b.size());
    return out;
  }
  // The object `name` of type T, built by `build` the first time any matrix of this source asks.
  template <typename T>
  std::shared_ptr<const T> shared(const std::string& name,
                                  const std::function<std::shared_ptr<const T>()>& build) const {
    return std::static_pointer_cast<const T>(sharedObjects().getOrBuild(
        name, std::type_index(typeid(T)), [&] { return std::shared_ptr<const void>(build()); }));
  }
};

// One stored form of a quantized [rows, cols] matrix.
class MatrixPayload {
 public:
  virtual ~MatrixPayload() = default;
  virtual std::string_view kind() const = 0;  // "codebook", "dictionary": the manifest's "payload"
  virtual int64_t rows() const = 0;
  virtual int64_t cols() const = 0;
  virtual MatrixRM dequantize() const = 0;  // W^ [rows, cols]
  // Exactly the bytes of the tensors write() adds under `key` (objects shared with other matrices are
  // not counted here: see sharedParts()).
  virtual int64_t storedBytes() const = 0;
  // Adds its tensors (named `key` + ".PART") and its fields of the manifest entry (besides "payload",
  // "rows", "cols", "bytes", ... which the exporter writes).
  virtual void write(PayloadWriter& writer, const std::string& key, nlohmann::json& manifest_entry) const = 0;

  // An object this payload shares with others (a dictionary) and the bytes it takes, once per export.
  struct SharedPart {
    std::shared_ptr<const void> object;  // identity (and kept alive while a run counts it)
    int64_t bytes = 0;
  };
  virtual std::vector<SharedPart> sharedParts() const { return {}; }
};

// Bytes of the distinct objects the matrices' payloads share, each counted once: what a model's
// compressed size adds to the sum of its matrices' bytes.
int64_t sharedPayloadBytes(const std::vector<QuantizedMatrix>& matrices);

// Rebuilds the payload of matrix `key` from its manifest entry and the source's tensors (throws
// moewb::Error naming the tensor and file at fault).
using PayloadReader = std::function<std::shared_ptr<const MatrixPayload>(
    const PayloadSource& source, const std::string& key, const nlohmann::json& manifest_entry)>;

// Registers (or replaces) the reader of `kind`. The built-in kinds (codebook, dictionary) are
// registered by the registry itself; a program or test adds its own with this or a static
// PayloadReaderRegistrar.
void registerPayloadReader(const std::string& kind, PayloadReader reader);
// The reader of `kind`, or nullptr.
const PayloadReader* findPayloadReader(std::string_view kind);
std::vector<std::string> payloadKinds();  // sorted
// Reads entry["payload"]'s kind through its reader; refuses an unknown kind, naming it and the known ones.
std::shared_ptr<const MatrixPayload> readPayload(const PayloadSource& source, const std::string& key,
                                                 const nlohmann::json& manifest_entry);

struct PayloadReaderRegistrar {
  PayloadReaderRegistrar(const std::string& kind, PayloadReader reader) {
    registerPayloadReader(kind, std::move(reader));
  }
};

// Packing shared by the payloads: `bits`-bit values (1..32), floor(32/bits) per little-endian uint32,
// value i of a word in bits [bits*i, bits*(i+1)), never straddling words; zero padding to whole words.
int64_t packedWordCount(int64_t count, int bits);
std::vector<uint32_t> packBits(std::span<const uint32_t> values, int bits);
// Throws moewb::Error (naming nothing: callers add the tensor) when `words` holds fewer than `count` values.
std::vector<uint32_t> unpackBits(std::span<const uint32_t> words, int64_t count, int bits);

}  // namespace moewb::quant

// SPDX-License-Identifier: MIT
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "moewb/dtype.h"
#include "moewb/progress.h"
#include "moewb/safetensors.h"

namespace moewb {

// One tensor of a (possibly sharded) checkpoint: where it lives, not its data.
struct TensorRecord {
  std::string name;
  int file = 0;  // index into Checkpoint::files()
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // absolute byte offset in the file
  uint64_t nbytes = 0;
  int64_t numel() const { return shapeElementCount(shape); }
};

// A Hugging Face checkpoint opened lazily: opening reads headers and JSON configs only; shards are
// memory-mapped the first time a tensor of theirs is read. Thread-safe for concurrent reads.
class Checkpoint {
 public:
  // `path` is a directory (model.safetensors.index.json, model.safetensors, or *.safetensors inside),
  // an index JSON, or a single .safetensors file. Throws moewb::Error naming the file at fault.
  // `progress` hears about the shards' headers (hundreds for the largest models) and returning false stops
  // the opening (moewb::Cancelled).
  static std::shared_ptr<Checkpoint> open(const std::string& path, const ProgressFn& progress = {});

  const std::string& root() const { return root_; }  // directory holding the checkpoint
  const std::vector<std::string>& files() const { return files_; }
  const std::vector<TensorRecord>& tensors() const { return tensors_; }
  std::optional<std::size_t> find(const std::string& name) const;
  const TensorRecord& tensor(std::size_t i) const { return tensors_.at(i); }
  // config.json (empty object when absent) and the index's / single file's __metadata__.
  const nlohmann::json& config() const { return config_; }
  // Identity of all files (paths, sizes, mtimes) for caches keyed by file identity.
  const std::string& identity() const { return identity_; }
  uint64_t totalBytes() const;

  // Raw bytes of a tensor (maps its shard on first use). The span stays valid while the Checkpoint lives.
  std::span<const std::byte> bytes(std::size_t tensor) const;

  // All elements as float (row-major, shape of the record). FP8 weights that have a companion
  // `<name>_scale_inv` (DeepSeek-V3 block scales, block size from config quantization_config) or
  // `<name>_scale` are de-scaled.
  std::vector<float> readFloat(std::size_t tensor) const;

 private:
  Checkpoint() = default;
  std::string root_;
  std::vector<std::string> files_;
  std::vector<TensorRecord> tensors_;
  std::unordered_map<std::string, std::size_t> by_name_;
  nlohmann::json config_ = nlohmann::json::object();
  std::string identity_;
  mutable std::mutex map_mutex_;
  mutable std::vector<std::shared_ptr<MappedFile>> maps_;
};

}  // namespace moewb

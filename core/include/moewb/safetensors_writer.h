// SPDX-License-Identifier: MIT
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "moewb/dtype.h"

namespace moewb {

// Builds a safetensors file in memory and writes it atomically (temporary file + rename). Used by the
// compressed-model export, the dequantized export and tests that need synthetic checkpoints.
class SafetensorsWriter {
 public:
  // Copies `data` (tightly packed, little-endian, dtypeSize(dtype) * numel(shape) bytes).
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::span<const std::byte> data);
  // Converts float values to `dtype` (F32, F16 or BF16; round to nearest even).
  void addFloat(const std::string& name, DType dtype, std::vector<int64_t> shape, std::span<const float> values);
  void setMetadata(std::map<std::string, std::string> metadata) { metadata_ = std::move(metadata); }
  std::size_t size() const { return tensors_.size(); }
  uint64_t dataBytes() const { return data_bytes_; }

  // The complete file image (header + data), tensors in insertion order.
  std::string serialize() const;
  void write(const std::filesystem::path& file) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> data;
  };
  std::vector<Entry> tensors_;
  // Kept beside tensors_ so that adding stays constant time: exports add ~90k tensors to one writer.
  std::unordered_set<std::string> names_;
  uint64_t data_bytes_ = 0;
  std::map<std::string, std::string> metadata_;
};

}  // namespace moewb

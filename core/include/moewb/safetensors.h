// SPDX-License-Identifier: MIT
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "moewb/dtype.h"

namespace moewb {

// Product of the dimensions (1 for a scalar); shapes come from validated headers, so it cannot overflow.
int64_t shapeElementCount(std::span<const int64_t> shape);

struct SafetensorsTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data buffer (after the header)
  uint64_t end = 0;
  int64_t numel() const { return shapeElementCount(shape); }
};

struct SafetensorsHeader {
  uint64_t header_size = 0;  // N, the JSON length; the data buffer starts at 8 + N
  std::vector<SafetensorsTensor> tensors;  // in file (offset) order
  std::map<std::string, std::string> metadata;
  uint64_t dataStart() const { return 8 + header_size; }
};

// Largest header accepted, as in the reference implementation.
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;
// A tensor with a zero dimension holds no values, so its byte size cannot bound its other dimensions; their
// product is limited to this (real empty tensors are [0] or [0, hidden]). Readers size per-row and
// per-expert tables from shapes: [200000000, 0] would cost gigabytes for a 125-byte file.
inline constexpr uint64_t kMaxEmptyTensorExtent = uint64_t(1) << 24;

// Parses and validates a whole safetensors file image (or at least its header when `file_size` is the
// size of the full file and `bytes` holds at least the header). Throws moewb::Error naming `file_name`
// (and the tensor, where one is at fault) for every rule the reference implementation enforces:
// 8-byte LE length, length <= 100 MB and within the file, UTF-8 JSON object, known dtype, non-negative
// shapes without overflow, offsets contiguous from 0 without holes or overlaps, end-begin equal to the
// dtype size times the element count, the buffer fully used, __metadata__ a string->string map.
SafetensorsHeader parseSafetensorsHeader(std::span<const std::byte> bytes, uint64_t file_size,
                                         const std::string& file_name);

// A read-only memory map of a file. Move-only.
class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::string& path);  // throws moewb::Error
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Identity for caches: device, inode, size and modification time.
  std::string identity() const { return identity_; }

 private:
  MappedFile() = default;
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  std::string path_;
  std::string identity_;
};

// Reads only the header of a file (pread, no mapping); used when opening huge sharded checkpoints.
SafetensorsHeader readSafetensorsHeader(const std::string& path, std::string* identity = nullptr);

}  // namespace moewb

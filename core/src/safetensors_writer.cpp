// SPDX-License-Identifier: MIT
#include "moewb/safetensors_writer.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "moewb/atomic_file.h"
#include "moewb/error.h"

namespace moewb {

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            std::span<const std::byte> data) {
  uint64_t numel = 1;
  for (auto d : shape) {
    if (d < 0) throw Error("tensor '" + name + "': negative dimension in shape");
    numel *= static_cast<uint64_t>(d);
  }
  if (numel * dtypeSize(dtype) != data.size())
    throw Error("tensor '" + name + "': " + std::to_string(data.size()) +
                " bytes given, shape and dtype need " + std::to_string(numel * dtypeSize(dtype)));
  if (!names_.insert(name).second)
    throw Error("tensor '" + name + "' added twice to the same safetensors file");
  tensors_.push_back({name, dtype, std::move(shape), std::vector<std::byte>(data.begin(), data.end())});
  data_bytes_ += data.size();
}

void SafetensorsWriter::addFloat(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                 std::span<const float> values) {
  std::vector<std::byte> bytes(values.size() * dtypeSize(dtype));
  switch (dtype) {
    case DType::F32:
      std::memcpy(bytes.data(), values.data(), bytes.size());
      break;
    case DType::BF16:
    case DType::F16:
      for (std::size_t i = 0; i < values.size(); ++i) {
        uint16_t h = dtype == DType::BF16 ? floatToBf16(values[i]) : floatToHalf(values[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
      break;
    default:
      throw Error("tensor '" + name + "': float values can be stored as F32, F16 or BF16 only");
  }
  add(name, dtype, std::move(shape), bytes);
}

std::string SafetensorsWriter::serialize() const {
  // The header object is written entry by entry in insertion order, so offsets appear in file order. Not
  // through nlohmann::ordered_json: its operator[] searches the entries linearly, quadratic over a header.
  std::string json = "{";
  if (!metadata_.empty()) json += "\"__metadata__\":" + nlohmann::json(metadata_).dump();
  uint64_t offset = 0;
  for (const auto& e : tensors_) {
    const nlohmann::ordered_json entry = {{"dtype", dtypeName(e.dtype)},
                                          {"shape", e.shape},
                                          {"data_offsets", {offset, offset + e.data.size()}}};
    if (json.size() > 1) json += ',';
    json += nlohmann::json(e.name).dump() + ':' + entry.dump();
    offset += e.data.size();
  }
  json += '}';
  // Pad the header with spaces so the data buffer starts 8-byte aligned (as the reference writer does).
  while ((8 + json.size()) % 8 != 0) json.push_back(' ');
  std::string out;
  out.reserve(8 + json.size() + offset);
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += json;
  for (const auto& e : tensors_) out.append(reinterpret_cast<const char*>(e.data.data()), e.data.size());
  return out;
}

void SafetensorsWriter::write(const std::filesystem::path& file) const {
  writeFileAtomically(file, serialize());
}

}  // namespace moewb

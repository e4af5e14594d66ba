// SPDX-License-Identifier: MIT
#include "moewb/npy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "moewb/atomic_file.h"
#include "moewb/dtype.h"
#include "moewb/error.h"
#include "moewb/regular_file.h"

namespace moewb {

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

int64_t NpyArray::dim(std::size_t axis) const {
  if (axis >= shape.size())
    throw Error(fmt::format("npy array has {} dimensions, axis {} requested", shape.size(), axis));
  return shape[axis];
}

namespace {

// Value of `'key': ...` in the header dictionary (a Python literal); returns the raw text.
std::string headerField(const std::string& header, const std::string& key, const std::string& path) {
  auto pos = header.find("'" + key + "'");
  if (pos == std::string::npos) throw Error(fmt::format("{}: npy header has no '{}' field", path, key));
  pos = header.find(':', pos);
  if (pos == std::string::npos) throw Error(fmt::format("{}: malformed npy header", path));
  ++pos;
  while (pos < header.size() && header[pos] == ' ') ++pos;
  if (pos < header.size() && header[pos] == '(') {
    auto end = header.find(')', pos);
    if (end == std::string::npos) throw Error(fmt::format("{}: malformed npy shape", path));
    return header.substr(pos, end - pos + 1);
  }
  auto end = header.find_first_of(",}", pos);
  return header.substr(pos, end - pos);
}

// "(3, 4)", "(5,)", "()": non-negative integers only; "(-5,)" was read as 5.
std::vector<int64_t> parseShape(const std::string& text, const std::string& path) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')')
    throw Error(fmt::format("{}: npy shape '{}' is not a tuple", path, text));
  std::vector<int64_t> shape;
  std::size_t i = 1;
  while (i + 1 < text.size()) {
    std::size_t end = text.find(',', i);
    if (end == std::string::npos) end = text.size() - 1;
    std::string item = text.substr(i, end - i);
    item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
    i = end + 1;
    if (item.empty() && i >= text.size() - 1 && !shape.empty()) break;  // "(5,)"
    if (item.empty() || item.size() > 15 || !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
      throw Error(fmt::format("{}: npy shape {} holds '{}', expected non-negative integers", path, text, item));
    shape.push_back(std::stoll(item));
  }
  return shape;
}

template <typename T>
void convertValues(const char* src, std::size_t count, float* dst) {
  for (std::size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    dst[i] = static_cast<float>(v);
  }
}

}  // namespace

NpyArray readNpy(const std::string& path) {
  // Token ids and calibration arrays: far below 4 GB.
  const std::string bytes = readRegularFile(path, uint64_t(4) << 30, ".npy file");
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    throw Error(fmt::format("{}: not a .npy file (magic \\x93NUMPY expected)", path));
  const int major = static_cast<unsigned char>(bytes[6]);
  std::size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw Error(fmt::format("{}: truncated .npy header", path));
    uint32_t len;
    std::memcpy(&len, bytes.data() + 8, 4);
    header_len = len;
    header_start = 12;
  } else {
    throw Error(fmt::format("{}: .npy format version {} is not supported (1-3 expected)", path, major));
  }
  if (header_start + header_len > bytes.size()) throw Error(fmt::format("{}: truncated .npy header", path));
  const std::string header = bytes.substr(header_start, header_len);

  std::string descr = headerField(header, "descr", path);
  descr.erase(std::remove(descr.begin(), descr.end(), '\''), descr.end());
  if (headerField(header, "fortran_order", path).find("True") != std::string::npos)
    throw Error(fmt::format("{}: Fortran-ordered arrays are not supported (save with C order)", path));
  const std::string shape_text = headerField(header, "shape", path);

  NpyArray out;
  out.shape = parseShape(shape_text, path);

  if (descr.size() < 3 || descr.size() > 4 || descr[0] == '>' ||
      !std::all_of(descr.begin() + 2, descr.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw Error(fmt::format("{}: dtype '{}' is not supported (little-endian numeric expected)", path, descr));
  const char kind = descr[1];
  const int width = std::stoi(descr.substr(2));
  const std::size_t data_start = header_start + header_len;
  // Element count checked against the data before it is multiplied out (no overflow, no allocation).
  std::size_t count = 1;
  for (int64_t d : out.shape) {
    if (d != 0 && count > (bytes.size() - std::min(bytes.size(), data_start)) / std::size_t(d))
      throw Error(
          fmt::format("{}: data is shorter than the shape {} of dtype {} needs", path, shape_text, descr));
    count *= std::size_t(d);
  }
  if (width <= 0 || data_start + count * std::size_t(width) > bytes.size())
    throw Error(
        fmt::format("{}: data is shorter than the shape {} of dtype {} needs", path, shape_text, descr));
  out.data.resize(count);
  const char* src = bytes.data() + data_start;
  float* dst = out.data.data();
  if (kind == 'f' && width == 4)
    convertValues<float>(src, count, dst);
  else if (kind == 'f' && width == 8)
    convertValues<double>(src, count, dst);
  else if (kind == 'f' && width == 2)
    convertToFloat(DType::F16, reinterpret_cast<const std::byte*>(src), count, dst);
  else if (kind == 'i' && width == 1)
    convertValues<int8_t>(src, count, dst);
  else if (kind == 'i' && width == 2)
    convertValues<int16_t>(src, count, dst);
  else if (kind == 'i' && width == 4)
    convertValues<int32_t>(src, count, dst);
  else if (kind == 'i' && width == 8)
    convertValues<int64_t>(src, count, dst);
  else if ((kind == 'u' || kind == 'b') && width == 1)
    convertValues<uint8_t>(src, count, dst);
  else if (kind == 'u' && width == 2)
    convertValues<uint16_t>(src, count, dst);
  else if (kind == 'u' && width == 4)
    convertValues<uint32_t>(src, count, dst);
  else if (kind == 'u' && width == 8)
    convertValues<uint64_t>(src, count, dst);
  else
    throw Error(fmt::format("{}: dtype '{}' is not supported", path, descr));
  return out;
}

void writeNpy(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  std::string shape_text = "(";
  int64_t count = 1;
  for (auto d : shape) {
    shape_text += std::to_string(d) + ",";
    count *= d;
  }
  if (shape.size() > 1) shape_text.pop_back();
  shape_text += ")";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_text + ", }";
  // Pad so that the data starts at a multiple of 64 bytes, ending the header with a newline.
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(count) * sizeof(float));
  writeFileAtomically(path, out);
}

}  // namespace moewb

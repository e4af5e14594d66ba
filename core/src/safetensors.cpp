// SPDX-License-Identifier: MIT
// Safetensors header parsing with the same rules as the reference implementation (huggingface/safetensors):
// every rule has a test in tests/core/safetensors_test.cpp and the parser has a fuzz target.
#include "moewb/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <nlohmann/json.hpp>

#include "moewb/error.h"

namespace moewb {

int64_t shapeElementCount(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

namespace {

[[noreturn]] void fail(const std::string& file, const std::string& what) { throw Error(file + ": " + what); }

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// Strict UTF-8 check (no overlongs, no surrogates, max U+10FFFF), as Rust's str::from_utf8 does.
bool isValidUtf8(const unsigned char* s, std::size_t n) {
  std::size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (std::size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return false;
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

uint64_t readU64LE(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// A JSON number that is a non-negative integer representable in 64 bits.
bool asUnsigned(const nlohmann::json& j, uint64_t& out) {
  if (j.is_number_unsigned()) {
    out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer()) {
    auto v = j.get<int64_t>();
    if (v < 0) return false;
    out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

SafetensorsTensor parseTensorEntry(const std::string& file, const std::string& name, const nlohmann::json& v) {
  auto where = [&](const std::string& what) { fail(file, "tensor '" + name + "': " + what); };
  if (!v.is_object()) where("expected an object with dtype, shape and data_offsets");
  SafetensorsTensor t;
  t.name = name;
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) where("missing string field 'dtype'");
  auto parsed = parseDType(dt->get<std::string>());
  if (!parsed) where("unknown dtype '" + dt->get<std::string>() + "' (expected one of F64 F32 F16 BF16 F8_E4M3 F8_E5M2 I64 I32 I16 I8 U64 U32 U16 U8 BOOL)");
  t.dtype = *parsed;
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) where("missing array field 'shape'");
  for (const auto& d : *sh) {
    uint64_t dim;
    if (!asUnsigned(d, dim) || dim > static_cast<uint64_t>(INT64_MAX)) where("shape must hold non-negative integers");
    t.shape.push_back(static_cast<int64_t>(dim));
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2) where("'data_offsets' must be [begin, end]");
  if (!asUnsigned((*off)[0], t.begin) || !asUnsigned((*off)[1], t.end))
    where("'data_offsets' must hold non-negative integers");
  return t;
}

}  // namespace

SafetensorsHeader parseSafetensorsHeader(std::span<const std::byte> bytes, uint64_t file_size,
                                         const std::string& file) {
  if (file_size < 8 || bytes.size() < 8) fail(file, "file too small for a safetensors header (need at least 8 bytes)");
  SafetensorsHeader h;
  h.header_size = readU64LE(bytes.data());
  if (h.header_size > kMaxSafetensorsHeader)
    fail(file, "header length " + std::to_string(h.header_size) + " exceeds the 100 MB limit (corrupt or not a safetensors file)");
  if (h.header_size > file_size - 8)
    fail(file, "header length " + std::to_string(h.header_size) + " runs past the end of the file (" +
                   std::to_string(file_size) + " bytes)");
  if (bytes.size() < 8 + h.header_size) fail(file, "header truncated");
  const auto* text = reinterpret_cast<const unsigned char*>(bytes.data() + 8);
  if (!isValidUtf8(text, h.header_size)) fail(file, "header is not valid UTF-8");
  if (h.header_size == 0 || text[0] != '{') fail(file, "header must be a JSON object starting with '{'");

  nlohmann::json j;
  // JSON parsers keep the last of two equal keys; a header that names a tensor (or a field) twice is
  // ambiguous, so it is refused, naming the key. One set of keys per open object.
  std::vector<std::set<std::string>> keys_of_open_objects;
  std::string duplicate;
  const nlohmann::json::parser_callback_t no_duplicates = [&](int, nlohmann::json::parse_event_t event,
                                                              nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) keys_of_open_objects.emplace_back();
    if (event == Event::object_end && !keys_of_open_objects.empty()) keys_of_open_objects.pop_back();
    if (event == Event::key && !keys_of_open_objects.empty() && duplicate.empty() &&
        !keys_of_open_objects.back().insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  try {
    j = nlohmann::json::parse(reinterpret_cast<const char*>(text), reinterpret_cast<const char*>(text) + h.header_size,
                              no_duplicates);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for numbers beyond double (found by the fuzzer).
    fail(file, std::string("header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(file, "header must be a JSON object");
  if (!duplicate.empty()) fail(file, "header has the key '" + duplicate + "' twice (expected each key once)");

  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail(file, "__metadata__ must be an object of string values");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail(file, "__metadata__ value '" + m.key() + "' must be a string");
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parseTensorEntry(file, it.key(), *it));
  }

  // Offsets must tile the data buffer exactly: sorted by (begin, end), each begins where the previous
  // ended, and each is exactly as long as its dtype and shape say.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t buffer_size = file_size - 8 - h.header_size;
  uint64_t expected_begin = 0;
  for (const auto& t : h.tensors) {
    if (t.begin != expected_begin)
      fail(file, "tensor '" + t.name + "': data begins at " + std::to_string(t.begin) + " but the previous tensor ends at " +
                     std::to_string(expected_begin) + (t.begin > expected_begin ? " (hole in the data buffer)" : " (overlapping tensors)"));
    if (t.end < t.begin) fail(file, "tensor '" + t.name + "': data_offsets end before they begin");
    // Product of the non-zero dimensions: it bounds what readers allocate per row or per expert, and a
    // zero dimension makes the byte size 0 whatever the others say ([3037000500, 3037000500, 0]).
    uint64_t extent = 1;
    bool empty = false;
    for (auto d : t.shape) {
      if (d == 0) {
        empty = true;
        continue;
      }
      if (extent > UINT64_MAX / static_cast<uint64_t>(d))
        fail(file, "tensor '" + t.name + "': element count of the shape overflows");
      extent *= static_cast<uint64_t>(d);
    }
    if (empty && extent > kMaxEmptyTensorExtent)
      fail(file, "tensor '" + t.name + "': shape " + shapeText(t.shape) +
                     " holds no values but declares " + std::to_string(extent) +
                     " along its other dimensions (at most " + std::to_string(kMaxEmptyTensorExtent) +
                     " expected: a corrupt or hostile header)");
    const uint64_t elements = empty ? 0 : extent;
    const uint64_t esize = dtypeSize(t.dtype);
    if (elements > UINT64_MAX / esize) fail(file, "tensor '" + t.name + "': byte size of the shape overflows");
    if (t.end - t.begin != elements * esize)
      fail(file, "tensor '" + t.name + "': data_offsets span " + std::to_string(t.end - t.begin) + " bytes but " +
                     std::string(dtypeName(t.dtype)) + " with this shape needs " + std::to_string(elements * esize));
    expected_begin = t.end;
  }
  if (expected_begin != buffer_size)
    fail(file, "tensors cover " + std::to_string(expected_begin) + " bytes of a " + std::to_string(buffer_size) +
                   "-byte data buffer (the file is truncated or has trailing data)");
  return h;
}

namespace {
std::string identityOf(const struct stat& st, const std::string& path) {
  return path + "|" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) +
         ":" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
}
}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO named like a shard must not wait for a writer (it is refused below as
  // not a regular file); for regular files the flag changes nothing.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = static_cast<uint64_t>(st.st_size);
  m->identity_ = identityOf(st, path);
  if (m->size_ > 0) {
    void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw Error(path + ": cannot memory-map: " + std::strerror(err));
    }
    m->data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);
  return m;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
}

SafetensorsHeader readSafetensorsHeader(const std::string& path, std::string* identity) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block (MappedFile::open)
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw Error(path + ": not a readable regular file (a FIFO, device or folder is never read as a shard)");
  if (identity) *identity = identityOf(st, path);
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  std::byte len_bytes[8];
  if (file_size < 8 || ::pread(fd, len_bytes, 8, 0) != 8)
    throw Error(path + ": file too small for a safetensors header (need at least 8 bytes)");
  const uint64_t n = readU64LE(len_bytes);
  // Validate the length before allocating so a hostile file cannot make us allocate gigabytes.
  if (n > kMaxSafetensorsHeader || n > file_size - 8) return parseSafetensorsHeader(std::span(len_bytes, 8), file_size, path);
  std::vector<std::byte> buf(8 + n);
  std::memcpy(buf.data(), len_bytes, 8);
  uint64_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, buf.data() + 8 + got, n - got, static_cast<off_t>(8 + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw Error(path + ": cannot read header: " + (r < 0 ? std::strerror(errno) : "unexpected end of file"));
    got += static_cast<uint64_t>(r);
  }
  return parseSafetensorsHeader(buf, file_size, path);
}

}  // namespace moewb

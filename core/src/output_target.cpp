// SPDX-License-Identifier: MIT
#include "moewb/output_target.h"

#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "moewb/error.h"

namespace fs = std::filesystem;

namespace moewb {
namespace {

std::string quoted(const fs::path& p) {
  return "'" + p.string() + "'";
}

// The path with symbolic links resolved as far as it exists; a loop or an unreadable link is the user's
// error to fix, said as such (std::filesystem would throw "filesystem error: ...").
fs::path resolved(const fs::path& p, const std::string& option) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (!ec && !r.has_filename()) r = r.parent_path();  // "out/" and "out" are one target
  if (ec)
    throw Error(fmt::format("{} {}: cannot resolve the path ({}; a symbolic link loop?)", option, quoted(p),
                            ec.message()));
  return r;
}

// True when `inner` is `outer` or lies inside it (both resolved).
bool within(const fs::path& inner, const fs::path& outer) {
  const fs::path rel = inner.lexically_relative(outer);
  return !rel.empty() && *rel.begin() != "..";
}

nlohmann::json readSmallJson(const fs::path& p) {
  std::error_code ec;
  // A moewb manifest or index is a few MB even for 100k tensors; a huge file here is not ours.
  if (!fs::is_regular_file(p, ec) || fs::file_size(p, ec) > (uint64_t(256) << 20) || ec) return nullptr;
  std::ifstream in(p);
  return nlohmann::json::parse(in, nullptr, false);
}

std::size_t entriesIn(const fs::path& dir) {
  std::error_code ec;
  std::size_t n = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

}  // namespace

std::string byteSizeText(uint64_t bytes) {
  if (bytes >= 1'000'000'000ull) return fmt::format("{:.2f} GB", double(bytes) / 1e9);
  if (bytes >= 1'000'000ull) return fmt::format("{:.1f} MB", double(bytes) / 1e6);
  if (bytes >= 1'000ull) return fmt::format("{:.1f} kB", double(bytes) / 1e3);
  return fmt::format("{} B", bytes);
}

bool isMoewbExport(const fs::path& dir) {
  const nlohmann::json manifest = readSmallJson(dir / "manifest.json");
  if (manifest.is_object() && manifest.contains("format") && manifest["format"].is_string() &&
      manifest["format"].get<std::string>().starts_with("moewb-"))
    return true;
  const nlohmann::json index = readSmallJson(dir / "model.safetensors.index.json");
  return index.is_object() && index.contains("metadata") && index["metadata"].is_object() &&
         index["metadata"].contains("moewb_export");
}

void checkOutputTarget(const OutputTarget& t) {
  if (t.path.empty()) return;
  const std::string& option = t.option;
  const fs::path target = resolved(t.path, option);
  const bool folder = t.kind == OutputKind::Folder;
  for (const fs::path& input : t.inputs) {
    if (input.empty()) continue;
    const fs::path in = resolved(input, option);
    if (in == target)
      throw Error(fmt::format("{} {} is {} this run reads; choose another {}", option, quoted(t.path),
                              quoted(input), folder ? "folder" : "file"));
    if (folder && within(in, target))
      throw Error(fmt::format("{} {} holds {}, which this run reads; choose another folder", option,
                              quoted(t.path), quoted(input)));
  }
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw Error(fmt::format("{} {}: cannot inspect it ({})", option, quoted(t.path), ec.message()));
  if (!fs::exists(st)) return;
  if (folder) {
    if (!fs::is_directory(st))
      throw Error(
          fmt::format("{} {} exists and is not a folder; moewb writes a folder there and never replaces "
                      "a file with one: choose another name",
                      option, quoted(t.path)));
    const std::size_t entries = entriesIn(target);
    if (entries == 0) return;
    if (!t.replace)
      throw Error(
          fmt::format("{} {} exists and is not empty ({} entr{}); pass --force to replace a previous "
                      "moewb export there, or choose another folder",
                      option, quoted(t.path), entries, entries == 1 ? "y" : "ies"));
    if (!isMoewbExport(target))
      throw Error(
          fmt::format("{} {} is not a moewb export (no manifest.json or index written by moewb); "
                      "--force replaces only previous exports: choose another folder",
                      option, quoted(t.path)));
    return;
  }
  if (fs::is_directory(st))
    throw Error(fmt::format("{} {} is a folder; expected a file name", option, quoted(t.path)));
  if (!fs::is_regular_file(st))
    throw Error(
        fmt::format("{} {} exists and is not a regular file (a FIFO, device or socket); choose "
                    "another file name",
                    option, quoted(t.path)));
  if (fs::file_size(target, ec) == 0 || ec) return;
  if (!t.replace)
    throw Error(fmt::format("{} {} exists; pass --force to replace it, or choose another file name", option,
                            quoted(t.path)));
}

uint64_t checkOutputSpace(const OutputTarget& t, uint64_t bytes) {
  const std::string& option = t.option;
  // The staging folder or temporary file is created beside the target, so its parent must take it all
  // (a replaced export is removed only after the new one is in place).
  fs::path where = resolved(t.path, option).parent_path();
  std::error_code ec;
  while (!where.empty() && !fs::exists(where, ec) && where != where.root_path()) where = where.parent_path();
  if (!fs::is_directory(where, ec))
    throw Error(fmt::format("{} {}: {} is not a folder, so the output cannot be created under it", option,
                            quoted(t.path), quoted(where)));
  if (::access(where.c_str(), W_OK | X_OK) != 0)
    throw Error(fmt::format("{} {}: cannot write in {}: {}", option, quoted(t.path), quoted(where),
                            std::strerror(errno)));
  struct statvfs fsinfo {};
  if (::statvfs(where.c_str(), &fsinfo) != 0) return UINT64_MAX;  // unknown: the write itself will tell
  const uint64_t free_bytes = uint64_t(fsinfo.f_bavail) * uint64_t(fsinfo.f_frsize);
  if (free_bytes < bytes)
    throw Error(fmt::format("{} {}: the output needs about {}, but only {} is free in {}", option,
                            quoted(t.path), byteSizeText(bytes), byteSizeText(free_bytes), quoted(where)));
  return free_bytes;
}

}  // namespace moewb

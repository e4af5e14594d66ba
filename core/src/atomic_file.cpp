// SPDX-License-Identifier: MIT
#include "moewb/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "moewb/error.h"

namespace fs = std::filesystem;

namespace moewb {
namespace {
std::string randomSuffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::to_string(rng() % 1000000000ull);
}
}  // namespace

void writeFileAtomically(const fs::path& target, std::string_view contents) {
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  // The rename below would replace whatever is there: a folder fails with a confusing message, and a
  // FIFO or a device (`-o /dev/null` run as root) would be replaced by a file. Say so instead.
  const fs::file_status existing = fs::status(target, ec);
  if (fs::is_directory(existing)) throw Error("cannot write " + target.string() + ": it is a folder, expected a file");
  if (fs::exists(existing) && !fs::is_regular_file(existing))
    throw Error("cannot write " + target.string() + ": it exists and is not a regular file (a FIFO, device or socket)");
  fs::path tmp = dir / ("." + target.filename().string() + ".tmp-" + randomSuffix());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot write " + target.string() + ": " + std::strerror(errno));
  const char* p = contents.data();
  std::size_t left = contents.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      fs::remove(tmp, ec);
      throw Error("cannot write " + target.string() + ": " + std::strerror(err));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;  // before the clean-up, which may set errno to 0 ("...: Success")
    fs::remove(tmp, ec);
    throw Error("cannot write " + target.string() + ": " + std::strerror(err));
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    const std::string why = ec.message();  // before the clean-up reuses `ec` (it said "Success")
    fs::remove(tmp, ec);
    throw Error("cannot rename temporary file onto " + target.string() + ": " + why);
  }
}

StagingDirectory::StagingDirectory(fs::path target) : target_(std::move(target)) {
  fs::path parent = target_.has_parent_path() ? target_.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  staging_ = parent / ("." + target_.filename().string() + ".partial-" + randomSuffix());
  if (!fs::create_directory(staging_, ec) || ec)
    throw Error("cannot create a temporary directory beside " + target_.string() + ": " + ec.message());
}

StagingDirectory::~StagingDirectory() {
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(staging_, ec);
  }
}

void StagingDirectory::commit() {
  std::error_code ec;
  fs::path old;
  if (fs::exists(target_)) {
    // Callers check their target first (moewb/output_target.h); this is the last line: a folder output
    // never replaces a file.
    if (!fs::is_directory(target_))
      throw Error("cannot replace " + target_.string() + ": it is a file, and the output is a folder");
    old = target_.parent_path() / ("." + target_.filename().string() + ".old-" + randomSuffix());
    fs::rename(target_, old, ec);
    if (ec) throw Error("cannot replace " + target_.string() + ": " + ec.message());
  }
  fs::rename(staging_, target_, ec);
  if (ec) {
    if (!old.empty()) fs::rename(old, target_, ec);
    throw Error("cannot move the finished output into " + target_.string() + ": " + ec.message());
  }
  committed_ = true;
  if (!old.empty()) fs::remove_all(old, ec);
}

}  // namespace moewb

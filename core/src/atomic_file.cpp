// SPDX-License-Identifier: MIT
#include "moewb/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>

#include "moewb/error.h"

namespace fs = std::filesystem;

namespace moewb {
namespace {
// "PID-N": the writer's process id names its temporary files and folders, so that a later run can tell
// the leftovers of a killed run (no such process) from those of one still writing.
std::string randomSuffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::to_string(::getpid()) + "-" + std::to_string(rng() % 1000000000ull);
}

// Removes ".NAME.partial-PID-N", ".NAME.old-PID-N" and ".NAME.tmp-PID-N" beside `target` whose process is
// gone: what a run killed by SIGKILL or a power cut left (a cancelled or failed run removes its own).
// Names from before the process id was recorded (".NAME.partial-N", N random) read as a process id that
// does not exist, so they go too. Best effort: a leftover that cannot be removed is left for the user.
void removeStaleLeftovers(const fs::path& dir, const fs::path& target) {
  const std::string prefix = "." + target.filename().string() + ".";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string rest = name.substr(prefix.size());
    std::size_t digits = 0;
    for (const char* kind : {"partial-", "old-", "tmp-"})
      if (rest.starts_with(kind)) digits = std::string_view(kind).size();
    if (digits == 0) continue;
    std::size_t end_of_pid = digits;
    while (end_of_pid < rest.size() && std::isdigit(static_cast<unsigned char>(rest[end_of_pid]))) ++end_of_pid;
    if (end_of_pid == digits || end_of_pid - digits > 12 ||
        (end_of_pid < rest.size() && rest[end_of_pid] != '-'))
      continue;
    const long long pid = std::stoll(rest.substr(digits, end_of_pid - digits));
    const bool gone = pid <= 0 || pid > INT32_MAX || (::kill(pid_t(pid), 0) != 0 && errno == ESRCH);
    if (gone) {
      std::error_code rm;
      fs::remove_all(it->path(), rm);
    }
  }
}
}  // namespace

void writeFileAtomically(const fs::path& target, std::string_view contents) {
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  removeStaleLeftovers(dir, target);
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
  if (!target_.has_filename()) target_ = target_.parent_path();  // "out/" is the folder "out"
  fs::path parent = target_.has_parent_path() ? target_.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  removeStaleLeftovers(parent, target_);
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

// SPDX-License-Identifier: MIT
#include "moewb/regular_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "moewb/error.h"

namespace moewb {

std::string readRegularFile(const std::string& path, uint64_t max_bytes, std::string_view what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(fmt::format("{}: cannot open {}: {}", path, what, std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw Error(fmt::format("{}: cannot stat {}: {}", path, what, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    throw Error(fmt::format("{}: expected a regular file as {} (not a FIFO, device or folder)", path, what));
  const uint64_t size = uint64_t(st.st_size);
  if (size > max_bytes)
    throw Error(fmt::format("{}: {} is {:.2f} GB, more than the {:.2f} GB read at most (use a slice of it)",
                            path, what, double(size) / 1e9, double(max_bytes) / 1e9));
  std::string bytes(size, '\0');
  uint64_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, bytes.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("{}: cannot read {}: {}", path, what, std::strerror(errno)));
    if (n == 0) break;  // the file shrank while being read: what is there
    got += uint64_t(n);
  }
  bytes.resize(got);
  return bytes;
}

}  // namespace moewb

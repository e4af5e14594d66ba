// SPDX-License-Identifier: MIT
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace moewb {

// The whole contents of `path`, which must be a regular file of at most `max_bytes`: a FIFO, a device
// (`/dev/zero`, `/dev/urandom`) or a folder is refused at once instead of blocking or reading without end,
// and an oversized file before it is read. Errors name the path and say what was expected; `what` names the
// file's role in them ("text file", ".npy file").
std::string readRegularFile(const std::string& path, uint64_t max_bytes, std::string_view what);

}  // namespace moewb

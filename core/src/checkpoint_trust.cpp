// SPDX-License-Identifier: MIT
#include "moewb/checkpoint_trust.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "moewb/error.h"

namespace fs = std::filesystem;

namespace moewb {

namespace {

bool isWithin(const fs::path& inner, const fs::path& outer) {
  auto o = outer.begin(), i = inner.begin();
  for (; o != outer.end(); ++o, ++i)
    if (i == inner.end() || *i != *o) return false;
  return true;
}

// .../models--ORG--NAME/blobs when `folder` is .../models--ORG--NAME/snapshots/REV (both already resolved).
fs::path hubCacheBlobs(const fs::path& folder) {
  const fs::path snapshots = folder.parent_path();
  const fs::path repo = snapshots.parent_path();
  if (snapshots.filename() != "snapshots" || !repo.filename().string().starts_with("models--")) return {};
  return repo / "blobs";
}

}  // namespace

bool externalCheckpointFilesAllowed() {
  const char* env = std::getenv("MOEWB_ALLOW_EXTERNAL_FILES");
  return env && std::strcmp(env, "1") == 0;
}

void requireInsideCheckpoint(const fs::path& folder, const fs::path& file, std::string_view what) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(file, ec))) return;
  const fs::path target = fs::canonical(file, ec);
  if (ec) return;  // a dangling link or a loop: opening it gives the error, and it reads nothing
  const fs::path real_folder = fs::canonical(folder.empty() ? fs::path(".") : folder, ec);
  if (ec) return;
  if (isWithin(target, real_folder)) return;
  if (const fs::path blobs = hubCacheBlobs(real_folder); !blobs.empty() && isWithin(target, blobs)) return;
  if (externalCheckpointFilesAllowed()) return;
  throw Error(fmt::format(
      "{}: this {} is a link to {}, outside the checkpoint folder {}; moewb does not follow links out of a "
      "downloaded checkpoint (set MOEWB_ALLOW_EXTERNAL_FILES=1 to allow it for a folder you assembled)",
      file.string(), what, target.string(), real_folder.string()));
}

}  // namespace moewb

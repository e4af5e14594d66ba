// SPDX-License-Identifier: MIT
#pragma once
#include <filesystem>
#include <string_view>

namespace moewb {

// Checkpoints are downloaded from the internet, so the files a checkpoint folder names (the shards of its
// index, model.safetensors, config.json) are read only where they really are inside that folder. A symbolic
// link is followed when its target stays inside the folder, or — the Hugging Face hub cache's layout,
// models--ORG--NAME/snapshots/REV/FILE -> ../../blobs/SHA — inside the blobs folder of the same repository.
// Anything else is refused before a byte of the target is read (so none can reach an error message), unless
// the environment variable MOEWB_ALLOW_EXTERNAL_FILES=1 allows it for a folder assembled on purpose.
//
// `folder` is the checkpoint folder, `file` a path inside it (as listed, before resolving links) and `what`
// names the file's role for the message ("shard", "config"). A file that does not exist, a dangling link or a
// loop passes: opening it reads nothing and gives its own error.
void requireInsideCheckpoint(const std::filesystem::path& folder, const std::filesystem::path& file,
                             std::string_view what);

// MOEWB_ALLOW_EXTERNAL_FILES is set to 1.
bool externalCheckpointFilesAllowed();

}  // namespace moewb

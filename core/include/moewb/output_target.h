// SPDX-License-Identifier: MIT
#pragma once
// The one rule for every place moewb writes a user's output (an export folder, a K/V capture, a list of
// token ids, a report), checked before the work starts so that nothing of the user's is destroyed and a
// read-only or full disk is found before hours of quantization, not after (docs/output-safety.md):
//  - a target that does not exist, or an empty folder / empty file, is written;
//  - an existing non-empty target is replaced only with --force (OutputTarget::replace), and even then
//    only a folder that is a previous moewb export (isMoewbExport) or, for a one-file output, a regular
//    file; never a file or folder the run reads (the source checkpoint, its shards, the text);
//  - a folder output never replaces a file and a file output never replaces a folder; FIFOs, devices
//    and sockets are never written over.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace moewb {

enum class OutputKind { Folder, File };

struct OutputTarget {
  std::filesystem::path path;
  OutputKind kind = OutputKind::Folder;
  std::string option = "--out";  // how the user named the target, for messages ("kv: --out")
  bool replace = false;          // --force: an existing output may be replaced (see the rule above)
  // What the run reads: never replaced, nor a folder that holds one of them.
  std::vector<std::filesystem::path> inputs;
};

// Throws moewb::Error naming the option, the path and what would be lost when the rule forbids writing.
void checkOutputTarget(const OutputTarget& target);

// The folder where the target will be created (its nearest existing ancestor) must be a writable folder
// with at least `bytes` free; throws moewb::Error otherwise. Returns the free bytes there.
uint64_t checkOutputSpace(const OutputTarget& target, uint64_t bytes);

// A folder moewb wrote as an export: manifest.json with "format": "moewb-…" (a compressed export), or
// model.safetensors.index.json whose "metadata" has "moewb_export" (a dequantized export).
bool isMoewbExport(const std::filesystem::path& dir);

// "12.3 MB", "4.56 GB": sizes in messages.
std::string byteSizeText(uint64_t bytes);

}  // namespace moewb

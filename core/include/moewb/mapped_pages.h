// SPDX-License-Identifier: MIT
#pragma once
#include <cstddef>
#include <span>

namespace moewb {

// Gives the pages of a memory-mapped byte range back to the kernel (madvise MADV_DONTNEED), so reading
// a checkpoint far larger than memory does not keep every page it touched resident. Safe on the
// read-only private file mappings Checkpoint uses: the next access faults the data back in from the
// page cache. Advice only: on memory that is not a mapping it changes nothing but the resident set.
void releaseMappedPages(std::span<const std::byte> bytes);

}  // namespace moewb

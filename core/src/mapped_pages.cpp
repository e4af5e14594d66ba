// SPDX-License-Identifier: MIT
#include "moewb/mapped_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace moewb {

void releaseMappedPages(std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  // Whole pages only, rounded outwards: a page shared with a neighbouring tensor is simply read again.
  const auto begin = reinterpret_cast<uintptr_t>(bytes.data()) & ~(page - 1);
  const auto end = reinterpret_cast<uintptr_t>(bytes.data() + bytes.size());
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace moewb

// SPDX-License-Identifier: MIT
#pragma once
#include <cstdint>

namespace moewb {

// Peak resident memory of this process so far (Linux: VmHWM of /proc/self/status), 0 where unknown: what a
// run cost in host memory, for reports (`moewb generate`, `moewb bench quant`).
int64_t peakResidentBytes();

}  // namespace moewb

// SPDX-License-Identifier: MIT
#include "moewb/process_memory.h"

#include <fstream>
#include <string>

namespace moewb {

int64_t peakResidentBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // reported in kB
  return 0;
}

}  // namespace moewb

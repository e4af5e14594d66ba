// SPDX-License-Identifier: MIT
#include "model_loading.h"

#include <fmt/format.h>

#include "cli_progress.h"
#include "moewb/checkpoint.h"
#include "moewb/demo_model.h"

namespace moewb::cli {

CLI::Option* addModelArgument(CLI::App& cmd, std::string& model) {
  return cmd.add_option("model", model,
                        "Checkpoint directory, model.safetensors.index.json or .safetensors file "
                        "(default: the embedded demo model)");
}

std::shared_ptr<ModelCatalog> openModel(const std::string& model_arg) {
  auto ckpt = Checkpoint::open(resolveModelPath(model_arg), interruptCheck());
  return std::make_shared<ModelCatalog>(ckpt, interruptCheck());
}

std::string humanBytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000.0 && u < 4) {
    bytes /= 1000.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

std::string humanCount(double count) {
  if (count >= 1e9) return fmt::format("{:.2f}B", count / 1e9);
  if (count >= 1e6) return fmt::format("{:.2f}M", count / 1e6);
  if (count >= 1e3) return fmt::format("{:.1f}k", count / 1e3);
  return fmt::format("{:.0f}", count);
}

}  // namespace moewb::cli

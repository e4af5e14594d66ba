// SPDX-License-Identifier: MIT
// `moewb inspect [MODEL] [--json]`: architecture summary of a checkpoint (headers and config only).
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_progress.h"
#include "command_registry.h"
#include "model_loading.h"
#include "moewb/catalog.h"

namespace moewb::cli {
namespace {

nlohmann::json inspectJson(const ModelCatalog& cat) {
  const auto& ck = cat.checkpoint();
  nlohmann::json j;
  j["model_type"] = cat.modelType();
  j["family"] = cat.family();
  j["path"] = ck.root();
  j["num_layers"] = cat.layers().size();
  auto& layers = j["layers"] = nlohmann::json::array();
  for (const auto& L : cat.layers()) {
    nlohmann::json l{{"index", L.index}, {"mlp", mlpKindName(L.mlp)}, {"num_experts", L.num_experts},
                     {"num_shared_experts", L.num_shared_experts}, {"top_k", L.top_k}};
    if (!L.stack.empty()) l["stack"] = L.stack;
    layers.push_back(std::move(l));
  }
  auto& tensors = j["tensors"] = nlohmann::json::array();
  for (std::size_t i = 0; i < ck.tensors().size(); ++i) {
    if (i % 4096 == 0) throwIfInterrupted();  // ~100k tensors take a while: Ctrl-C stops before printing
    const auto& t = ck.tensors()[i];
    const auto& c = cat.classOf(i);
    nlohmann::json e{{"name", t.name},
                     {"file", std::filesystem::path(ck.files()[t.file]).filename().string()},
                     {"dtype", dtypeName(t.dtype)},
                     {"shape", t.shape},
                     {"layer", c.layer >= 0 ? nlohmann::json(c.layer) : nlohmann::json(nullptr)},
                     {"block", blockName(c.block)},
                     {"proj", c.proj == Proj::None ? nlohmann::json(nullptr) : nlohmann::json(projName(c.proj))},
                     {"expert", c.expert >= 0 ? nlohmann::json(c.expert) : nlohmann::json(nullptr)},
                     {"experts_in_tensor", c.experts_in_tensor}};
    if (c.experts_in_tensor > 0 && t.shape.size() == 3) e["layout"] = c.input_major ? "in_out" : "out_in";
    tensors.push_back(std::move(e));
  }
  j["params_total"] = cat.paramsTotal();
  j["params_by_block"] = cat.paramsByBlock();
  j["bytes_by_dtype"] = cat.bytesByDtype();
  j["unclassified"] = cat.unclassified();
  j["num_matrices"] = cat.matrices().size();
  return j;
}

void printSummary(const ModelCatalog& cat) {
  const auto& ck = cat.checkpoint();
  fmt::print("Model        {}\n", ck.root());
  fmt::print("Family       {} (model_type '{}')\n", cat.family(), cat.modelType());
  int moe = 0, dense = 0, max_experts = 0, shared = 0, top_k = 0;
  for (const auto& L : cat.layers()) {
    moe += L.mlp == MlpKind::Moe;
    dense += L.mlp == MlpKind::Dense;
    max_experts = std::max(max_experts, L.num_experts);
    shared = std::max(shared, L.num_shared_experts);
    top_k = std::max(top_k, L.top_k);
  }
  fmt::print("Layers       {} ({} MoE, {} dense MLP)\n", cat.layers().size(), moe, dense);
  if (moe) fmt::print("Experts      {} routed per MoE layer, top-{}, {} shared\n", max_experts, top_k, shared);
  fmt::print("Files        {} shard(s), {} tensors, {} 2-D weight matrices\n", ck.files().size(), ck.tensors().size(),
             cat.matrices().size());
  fmt::print("Parameters   {} ({})\n", humanCount(double(cat.paramsTotal())), humanBytes(double(ck.totalBytes())));
  fmt::print("\nParameters by block\n");
  const double total = double(cat.paramsTotal());
  for (const auto& [block, n] : cat.paramsByBlock())
    fmt::print("  {:<14} {:>10}  {:5.1f}%\n", block, humanCount(double(n)), 100.0 * double(n) / std::max(1.0, total));
  fmt::print("\nBytes by dtype\n");
  for (const auto& [dt, n] : cat.bytesByDtype()) fmt::print("  {:<14} {:>10}\n", dt, humanBytes(double(n)));
  fmt::print("\nLayers\n  {:>5}  {:<8} {:>7} {:>6} {:>5}\n", "layer", "mlp", "experts", "shared", "top-k");
  for (const auto& L : cat.layers())
    fmt::print("  {:>5}  {:<8} {:>7} {:>6} {:>5}{}\n", L.index, mlpKindName(L.mlp), L.num_experts, L.num_shared_experts,
               L.top_k, L.stack.empty() ? "" : "  (" + L.stack + ")");
  auto other = cat.unclassified();
  if (!other.empty()) {
    fmt::print("\n{} tensor(s) not recognised (block 'other'):\n", other.size());
    for (std::size_t i = 0; i < other.size() && i < 20; ++i) fmt::print("  {}\n", other[i]);
    if (other.size() > 20) fmt::print("  ... and {} more\n", other.size() - 20);
  }
}

const CommandRegistrar registrar{"inspect", [](CLI::App& root) {
  auto* cmd = root.add_subcommand("inspect", "Architecture summary: family, layers, experts, parameters by block and dtype");
  auto model = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  addModelArgument(*cmd, *model);
  cmd->add_flag("--json", *json, "Print one JSON object (layers, tensors with their classification, parameter counts)");
  cmd->callback([model, json] {
    auto cat = openModel(*model);
    // Built whole before anything is printed, so Ctrl-C (exit 130) never leaves half an answer.
    if (*json) {
      const std::string text = inspectJson(*cat).dump(1);
      throwIfInterrupted();
      std::cout << text << "\n";
    } else {
      throwIfInterrupted();
      printSummary(*cat);
    }
  });
}};

}  // namespace
}  // namespace moewb::cli

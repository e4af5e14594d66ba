// SPDX-License-Identifier: MIT
// `moewb bench quant`: exporting a checkpoint with DeepSeek-V3's count of tensors (~90k) must take time
// linear in that count (target: under 10 s on CI's 2-core machine). The tensors hold 2 bytes each, so what
// is measured is the bookkeeping per tensor: shard assignment, duplicate checks, headers, index, manifest.
// 10k/30k/60k tensors took 0.5/2.7/14.9 s while it was quadratic.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/quant/export.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/safetensors_writer.h"

namespace {

namespace fs = std::filesystem;

constexpr int kTensors = 90000;

// Written once per process: 90k bf16 tensors of one element in 8 shards, named like an MoE's experts.
const fs::path& headerOnlyCheckpoint() {
  static const fs::path dir = [] {
    const fs::path d =
        fs::temp_directory_path() / ("moewb-bench-export-" + std::to_string(std::random_device{}()));
    fs::create_directories(d);
    nlohmann::json weight_map = nlohmann::json::object();
    constexpr int kShards = 8;
    for (int shard = 0; shard < kShards; ++shard) {
      moewb::SafetensorsWriter w;
      const std::string file = "model-" + std::to_string(shard + 1) + "-of-8.safetensors";
      for (int t = shard; t < kTensors; t += kShards) {
        const std::string name = "model.layers." + std::to_string(t / 1500) + ".mlp.experts." +
                                 std::to_string(t % 1500 / 6) + ".extra_" + std::to_string(t % 6) + ".bias";
        w.addFloat(name, moewb::DType::BF16, {1}, std::vector<float>{0.5f});
        weight_map[name] = file;
      }
      w.write(d / file);
    }
    std::ofstream(d / "model.safetensors.index.json") << nlohmann::json{{"weight_map", weight_map}}.dump();
    std::ofstream(d / "config.json") << R"({"model_type":"llama"})";
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(headerOnlyCheckpoint(), ec);
    });
    return d;
  }();
  return dir;
}

void quant_export_header_only_90k_tensors(benchmark::State& state) {
  const moewb::ModelCatalog catalog(moewb::Checkpoint::open(headerOnlyCheckpoint().string()));
  moewb::quant::ModelQuantization nothing;
  nothing.settings.method = "rtn";
  const moewb::quant::ExportOptions options;  // one shard of 90k tensors, as the quadratic case had
  const fs::path out =
      headerOnlyCheckpoint().parent_path() / (headerOnlyCheckpoint().filename().string() + "-out");
  for (auto _ : state) {
    moewb::quant::writeCompressedModel(catalog, nothing, out, options);
    state.PauseTiming();
    fs::remove_all(out);
    state.ResumeTiming();
  }
  state.counters["tensors"] = kTensors;
}
BENCHMARK(quant_export_header_only_90k_tensors)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

}  // namespace

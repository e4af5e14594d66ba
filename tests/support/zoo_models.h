// SPDX-License-Identifier: MIT
#pragma once
// Copies of the zoo's tiny checkpoints (../shared/models/zoo) with config.json keys replaced and, where a
// checkpoint is inconsistent, tensors sliced: what the engine tests and the HF reference script
// (tools/hf_reference/make_zoo_references.py) both run. Header-only: only the engine tests use it.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "moewb/checkpoint.h"
#include "moewb/safetensors_writer.h"
#include "test_support.h"

namespace moewb::test {

inline std::filesystem::path zooModel(const std::string& name) {
  return sharedDir() / "models" / "zoo" / name;
}

// A copy of the checkpoint in `src` in a fresh temporary directory: config.json with the keys of
// `config_overrides` replaced (as Python's dict.update does in the reference script).
// With keep_kv_heads > 0 only the first keep_kv_heads KV heads survive: the first keep * head_dim rows
// of every k_proj / v_proj weight and bias, and num_key_value_heads = keep (the zoo's qwen2_moe declares
// 16 KV heads for 4 query heads, which neither HF nor the engine can run). Without slicing the tensor
// files are hard-linked (copied where that fails), not rewritten.
inline std::filesystem::path prepareModelCopy(
    const std::filesystem::path& src, const nlohmann::json& config_overrides = nlohmann::json::object(),
    int keep_kv_heads = 0) {
  namespace fs = std::filesystem;
  auto ckpt = Checkpoint::open(src.string());
  const fs::path dir = makeTempDir("moewb-model-copy");
  nlohmann::json config = ckpt->config();
  for (auto it = config_overrides.begin(); it != config_overrides.end(); ++it) config[it.key()] = it.value();
  if (keep_kv_heads > 0) {
    const int64_t head_dim =
        config.contains("head_dim") && config["head_dim"].is_number_integer()
            ? config["head_dim"].get<int64_t>()
            : config["hidden_size"].get<int64_t>() / config["num_attention_heads"].get<int64_t>();
    const int64_t rows = keep_kv_heads * head_dim;
    SafetensorsWriter w;
    for (std::size_t i = 0; i < ckpt->tensors().size(); ++i) {
      const TensorRecord& t = ckpt->tensor(i);
      std::vector<float> v = ckpt->readFloat(i);
      std::vector<int64_t> shape = t.shape;
      const bool kv =
          t.name.find("k_proj.") != std::string::npos || t.name.find("v_proj.") != std::string::npos;
      if (kv && !shape.empty() && shape[0] > rows) {
        const int64_t per_row = shape.size() == 2 ? shape[1] : 1;
        shape[0] = rows;
        v.resize(static_cast<std::size_t>(rows * per_row));
      }
      // bf16/f16 values survive the float round trip exactly; other dtypes are written as float32.
      const DType dtype = t.dtype == DType::BF16 || t.dtype == DType::F16 ? t.dtype : DType::F32;
      w.addFloat(t.name, dtype, shape, v);
    }
    w.write(dir / "model.safetensors");
    config["num_key_value_heads"] = keep_kv_heads;
  } else {
    for (const auto& entry : fs::directory_iterator(src)) {
      const std::string name = entry.path().filename().string();
      if (name.ends_with(".safetensors") || name == "model.safetensors.index.json") {
        // A hard link (a copy where the file system has none): moewb refuses symlinks that lead out of a
        // checkpoint folder (docs/output-safety.md), and a test's assembled copy is such a folder.
        std::error_code ec;
        fs::create_hard_link(entry.path(), dir / name, ec);
        if (ec) fs::copy_file(entry.path(), dir / name);
      }
    }
  }
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir;
}

}  // namespace moewb::test

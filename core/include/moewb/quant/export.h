// SPDX-License-Identifier: MIT
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/progress.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/quant/payload.h"

namespace moewb::quant {

// A compressed checkpoint (docs/export-format.md): safetensors shards with, per quantized matrix NAME,
// NAME.qweight (U32, packed codes), NAME.scales / NAME.zeros (F16 [rows, groups]) and for MiLo the
// compensators NAME.lora_u.* / NAME.lora_v.*; untouched tensors copied as they are; the source's
// config and tokenizer files; model.safetensors.index.json; and manifest.json with the method, the
// settings, the policy and per matrix {"rel_error", "rank", "bits", "bytes", ...} under "tensors".
// A matrix with a payload (codebook, dictionary, ...) is written by the payload itself, its entry saying
// "payload": KIND; objects its payload shares with others (a dictionary) are written once and listed
// under the manifest's top-level "shared".
struct ExportOptions {
  uint64_t max_shard_bytes = 2'000'000'000;
  // Replace an existing non-empty `out_dir` (--force); only a previous moewb export is ever replaced and
  // never the source checkpoint (moewb/output_target.h), whatever this says.
  bool replace_existing = false;
};

// Writes into a staging folder beside `out_dir` that replaces `out_dir` only when everything is written:
// a cancelled (progress returned false: throws Cancelled) or failed export leaves nothing behind. Throws
// moewb::Error before writing anything when `out_dir` may not be written (checkOutputTarget).
void writeCompressedModel(const ModelCatalog& catalog, const ModelQuantization& quantization,
                          const std::filesystem::path& out_dir, const ExportOptions& options = {},
                          const ProgressFn& progress = {});

// A bf16 checkpoint in the source's layout (same shard files, tensor names, shapes; dequantized matrices
// W^ = dequant(Q) + U^ V^ rounded to bf16, other tensors copied byte for byte) that Hugging Face
// transformers loads unchanged, with model.safetensors.index.json whose "metadata" says "moewb_export":
// "dequantized" (what marks it as a moewb export). Atomic and checked like writeCompressedModel
// (`options.max_shard_bytes` does not apply: the source's shard files are kept).
void writeDequantizedModel(const ModelCatalog& catalog, const ModelQuantization& quantization,
                           const std::filesystem::path& out_dir, const ExportOptions& options = {},
                           const ProgressFn& progress = {});
// The same with default options (the form callers used before options existed).
inline void writeDequantizedModel(const ModelCatalog& catalog, const ModelQuantization& quantization,
                                  const std::filesystem::path& out_dir, const ProgressFn& progress) {
  writeDequantizedModel(catalog, quantization, out_dir, ExportOptions{}, progress);
}

// Bytes an export of `quantization` will take, before it is written (dequantized: the bf16 checkpoint).
uint64_t predictedExportBytes(const ModelCatalog& catalog, const std::vector<std::size_t>& matrices,
                              const std::vector<int>& ranks, const QuantizeSettings& settings, bool dequantized);

// The files and folders an export of this checkpoint reads, which it must never replace.
std::vector<std::filesystem::path> exportInputs(const Checkpoint& checkpoint);

// Reopens a compressed export.
class CompressedModel {
 public:
  static std::shared_ptr<CompressedModel> open(const std::filesystem::path& dir);  // throws moewb::Error
  const nlohmann::json& manifest() const { return manifest_; }
  const Checkpoint& checkpoint() const { return *ckpt_; }
  std::vector<std::string> quantizedNames() const;  // manifest "tensors" keys
  bool isQuantized(const std::string& name) const { return manifest_.at("tensors").contains(name); }
  // Throws naming the tensor and file. A matrix stored as a payload is rebuilt by the reader registered
  // for its kind (moewb/quant/payload.h); objects it shares with other matrices are read once.
  QuantizedMatrix read(const std::string& name) const;
  MatrixRM dequantize(const std::string& name) const { return quant::dequantize(read(name)); }

 private:
  std::filesystem::path dir_;
  nlohmann::json manifest_;
  std::shared_ptr<Checkpoint> ckpt_;
  std::shared_ptr<SharedPayloadObjects> shared_ = std::make_shared<SharedPayloadObjects>();
};

}  // namespace moewb::quant

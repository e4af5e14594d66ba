// SPDX-License-Identifier: MIT
#include "moewb/engine/variants.h"

#include <fmt/format.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>

#include "moewb/catalog.h"
#include "moewb/dtype.h"
#include "moewb/engine/tokenizer.h"
#include "moewb/error.h"
#include "moewb/methods/spec.h"
#include "moewb/parallel.h"
#include "moewb/quant/export.h"
#include "moewb/quant/grouped_quant.h"
#include "moewb/quant/payload.h"

namespace moewb::engine {

namespace {

std::shared_ptr<const WeightProvider> replacing(std::shared_ptr<const Checkpoint> original,
                                                ReplacedWeights::Replacements repl, const std::string& label,
                                                ReplacedWeights::StoredForms stored = {}) {
  return std::make_shared<ReplacedWeights>(std::make_shared<CheckpointWeights>(std::move(original)),
                                           std::move(repl), label, std::move(stored));
}

std::string directoryLabel(const std::string& path) {
  auto p = std::filesystem::path(path);
  std::string label = p.filename().string();
  if (label.empty()) label = p.parent_path().filename().string();
  return label.empty() ? path : label;
}

}  // namespace

WeightVariant loadReplacementCheckpoint(std::shared_ptr<const Checkpoint> original, const std::string& path) {
  ReplacedWeights::Replacements repl;
  uint64_t stored = 0;
  // The original's matrices by name: plain 2-D tensors and the per-expert slices "<tensor>[e]" of fused
  // 3-D expert tensors, in the catalog's [out, in] orientation (what the engine asks its provider for).
  const ModelCatalog catalog(original);
  std::map<std::string, const WeightMatrix*> by_name;
  std::map<std::size_t, std::vector<const WeightMatrix*>> slices_of;  // fused tensor -> its slices
  for (const WeightMatrix& m : catalog.matrices()) {
    by_name.emplace(m.name, &m);
    if (m.slice >= 0) slices_of[m.tensor].push_back(&m);
  }
  ReplacedWeights::StoredForms stored_forms;  // grouped codes as stored, for native GPU kernels
  if (std::filesystem::exists(std::filesystem::path(path) / "manifest.json")) {
    // A compressed export: dequantize its quantized matrices on load (slices keep their "[e]" names).
    auto model = quant::CompressedModel::open(path);
    for (const auto& name : model->quantizedNames()) {
      auto q = model->read(name);
      if (!original->find(name) && !by_name.count(name))
        throw Error(fmt::format("{}: quantized matrix '{}' is not a weight matrix of {}", path, name,
                                original->root()));
      repl.emplace(name, std::make_shared<MatrixRM>(quant::dequantize(q)));
      stored += static_cast<uint64_t>(q.bytes);
      if (!q.payload) stored_forms.emplace(name, std::make_shared<quant::QuantizedMatrix>(std::move(q)));
    }
    // Objects the matrices share (a QMoE dictionary) are stored once, beside them.
    if (model->manifest().contains("shared"))
      for (const auto& [shared_name, part] : model->manifest().at("shared").items())
        stored += part.value("bytes", uint64_t(0));
  } else {
    auto variant_ckpt = Checkpoint::open(path);
    for (std::size_t i = 0; i < variant_ckpt->tensors().size(); ++i) {
      const auto& t = variant_ckpt->tensor(i);
      auto j = original->find(t.name);
      if (!j || original->tensor(*j).shape != t.shape) continue;
      if (t.shape.size() == 2) {
        auto values = variant_ckpt->readFloat(i);
        auto m = std::make_shared<MatrixRM>(t.shape[0], t.shape[1]);
        std::copy(values.begin(), values.end(), m->data());
        repl.emplace(t.name, std::move(m));
        stored += t.nbytes;
      } else if (auto fused = slices_of.find(*j); fused != slices_of.end()) {
        // A fused 3-D expert tensor in the original's layout (the dequantized export writes it so): one
        // replacement per expert slice, read with the original's strides.
        const auto values = variant_ckpt->readFloat(i);
        const std::byte* start = original->bytes(*j).data();
        for (const WeightMatrix* w : fused->second) {
          const ModelCatalog::RawView view = catalog.rawView(*w);
          const int64_t base =
              static_cast<int64_t>((view.data - start) / std::ptrdiff_t(dtypeSize(view.dtype)));
          auto m = std::make_shared<MatrixRM>(view.rows, view.cols);
          for (int64_t r = 0; r < view.rows; ++r)
            for (int64_t c = 0; c < view.cols; ++c)
              (*m)(r, c) = values[static_cast<std::size_t>(base + r * view.row_stride + c * view.col_stride)];
          repl.emplace(w->name, std::move(m));
        }
        stored += t.nbytes;
      }
    }
  }
  if (repl.empty())
    throw Error(
        fmt::format("{}: no tensor matches a 2-D weight of {} by name and shape (a compressed or dequantized "
                    "export of this model expected)",
                    path, original->root()));
  WeightVariant v;
  v.label = directoryLabel(path);
  v.replaced_matrices = repl.size();
  v.stored_bytes = stored;
  v.weights = replacing(original, std::move(repl), v.label, std::move(stored_forms));
  return v;
}

WeightVariant variantFromQuantization(std::shared_ptr<const Checkpoint> original,
                                      const quant::ModelQuantization& quantization, std::string label) {
  ReplacedWeights::Replacements repl;
  uint64_t stored = 0;
  ReplacedWeights::StoredForms stored_forms;
  for (const auto& m : quantization.matrices) {
    repl.emplace(m.source.name, std::make_shared<MatrixRM>(quant::dequantize(m)));
    stored += static_cast<uint64_t>(m.bytes);
    if (!m.payload && !m.base.codes.empty())
      stored_forms.emplace(m.source.name, std::make_shared<quant::QuantizedMatrix>(m));
  }
  stored += static_cast<uint64_t>(quant::sharedPayloadBytes(quantization.matrices));
  WeightVariant v;
  v.label = std::move(label);
  v.replaced_matrices = repl.size();
  v.stored_bytes = stored;
  v.weights = replacing(std::move(original), std::move(repl), v.label, std::move(stored_forms));
  return v;
}

WeightVariant quantizeVariant(std::shared_ptr<const Checkpoint> original, const std::string& spec,
                              const ProgressFn& progress, const quant::ExpertFrequencies* frequencies) {
  const methods::MethodSpec parsed = methods::parseMethodSpec(spec);
  const quant::QuantizeSettings& settings = parsed.settings;
  ModelCatalog catalog(original);
  const auto matrices = quant::quantizableMatrices(catalog);
  if (matrices.empty()) throw Error(fmt::format("{}: no quantizable weight matrices", original->root()));
  std::vector<int> ranks(matrices.size(), 0);
  if (parsed.method->usesRankPolicy()) {
    if (parsed.policy.empty())
      throw Error(fmt::format("quick spec '{}': {} needs a rank policy, e.g. {}:3:dense-64", spec,
                              parsed.method->name(), parsed.method->name()));
    const auto policy = quant::RankPolicy::parse(parsed.policy);
    if (policy.needsFrequencies() && !frequencies)
      throw Error(
          fmt::format("quick spec '{}': a frequency policy needs expert frequencies (--frequencies FILE from "
                      "`moewb freq --json`)",
                      spec));
    const auto facts = quant::matrixFacts(catalog, matrices, policy.needsKurtosis());
    ranks = quant::assignRanks(policy, facts, frequencies);
  }
  auto quantization = quant::quantizeModel(catalog, settings, matrices, ranks, progress);
  return variantFromQuantization(std::move(original), quantization, spec);
}

std::vector<int32_t> loadEvaluationIds(const std::string& model_dir, const std::string& text_file,
                                       const std::string& ids_file, std::optional<int32_t> bos, bool no_bos) {
  if (!ids_file.empty()) return readTokenIdsFile(ids_file);
  if (text_file.empty())
    throw Error("give the text to evaluate with --text FILE (or token ids with --ids FILE)");
  auto tokenizer = Tokenizer::forModel(model_dir);
  return tokenizeForEvaluation(*tokenizer, readTextFile(text_file), no_bos ? std::nullopt : bos);
}

uint64_t storedModelBytes(const Checkpoint& original, const WeightVariant& variant) {
  uint64_t replaced_bytes = 0;
  if (auto* replaced = dynamic_cast<const ReplacedWeights*>(variant.weights.get()))
    for (const auto& [name, matrix] : replaced->replacements())
      if (auto i = original.find(name)) replaced_bytes += original.tensor(*i).nbytes;
  return original.totalBytes() - replaced_bytes + variant.stored_bytes;
}

}  // namespace moewb::engine

// SPDX-License-Identifier: MIT
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/mapped_pages.h"

namespace moewb::quant {
struct QuantizedMatrix;  // moewb/quant/model_quantizer.h
}

namespace moewb::engine {

// Where the engine gets its weights from, one tensor at a time and only while a layer runs (layer
// streaming). The default reads the memory-mapped checkpoint; ReplacedWeights substitutes matrices (the
// dequantized results of a quantizer, in memory or read from an export), so the same evaluation compares
// the original model with its compressed variants.
class WeightProvider {
 public:
  virtual ~WeightProvider() = default;
  virtual bool contains(const std::string& tensor_name) const = 0;
  // A 2-D weight as float [out, in] (HF Linear layout). Throws moewb::Error naming the tensor when it is
  // missing or has another shape than `rows` x `cols` (pass -1 to skip a check). The name of a fused 3-D
  // expert tensor's slice is the catalog's WeightMatrix::name, "<tensor>[<expert>]", and the slice comes
  // in the catalog's [out, in] orientation (input-major layouts transposed).
  virtual MatrixRM matrix(const std::string& tensor_name, int64_t rows = -1, int64_t cols = -1) const = 0;
  // A 1-D tensor (norm weights, biases, router score biases) as float; checks the length when >= 0.
  virtual std::vector<float> vector(const std::string& tensor_name, int64_t length = -1) const = 0;
  // Rows `ids` of an embedding table [vocab, hidden] into out (ids.size() x hidden floats), without
  // converting the whole table.
  virtual void embeddingRows(const std::string& tensor_name, std::span<const int32_t> ids, int64_t hidden,
                             float* out) const = 0;
  // The compressed form of a replaced matrix as its method stored it (codes, scales, compensators), when
  // the provider has one: a backend that runs compressed weights natively (the GPU's W3A16 kernels) uses
  // it instead of the dequantized matrix. nullptr: only matrix() exists.
  virtual std::shared_ptr<const quant::QuantizedMatrix> storedForm(const std::string& /*tensor_name*/) const {
    return nullptr;
  }
};

// Reads the checkpoint's tensors (any float dtype, FP8 de-scaled; slices of fused 3-D expert tensors in
// bf16/f16/f32). After converting a tensor it gives the mapped pages back to the kernel (madvise
// DONTNEED: they stay in the page cache but stop counting in this process's resident set), so evaluating
// a model larger than RAM keeps only the current layer resident.
class CheckpointWeights final : public WeightProvider {
 public:
  explicit CheckpointWeights(std::shared_ptr<const Checkpoint> ckpt, bool release_pages = true);
  bool contains(const std::string& tensor_name) const override;
  MatrixRM matrix(const std::string& tensor_name, int64_t rows = -1, int64_t cols = -1) const override;
  std::vector<float> vector(const std::string& tensor_name, int64_t length = -1) const override;
  void embeddingRows(const std::string& tensor_name, std::span<const int32_t> ids, int64_t hidden,
                     float* out) const override;
  const Checkpoint& checkpoint() const { return *ckpt_; }

 private:
  std::size_t indexOf(const std::string& tensor_name) const;
  // The fused 3-D tensor and expert a "<tensor>[<expert>]" name refers to, if it does.
  std::optional<WeightMatrix> fusedSlice(const std::string& name) const;
  MatrixRM sliceMatrix(const WeightMatrix& slice) const;
  const ModelCatalog& catalog() const;
  std::shared_ptr<const Checkpoint> ckpt_;
  bool release_pages_;
  // Built on the first slice request only (classifying every tensor costs time on big checkpoints): it
  // knows each fused tensor's orientation, the one the quantizers and replacements use.
  mutable std::once_flag catalog_once_;
  mutable std::unique_ptr<ModelCatalog> catalog_;
  mutable std::unordered_map<std::string, std::size_t> slice_index_;  // slice name -> catalog matrix
};

// A base provider with some matrices replaced, keyed by WeightMatrix::name of the catalog (the tensor name
// for plain 2-D tensors, "<tensor>[<expert>]" for a slice of a fused 3-D expert tensor). Replacements
// must have the [out, in] shape of the matrix they replace.
class ReplacedWeights final : public WeightProvider {
 public:
  using Replacements = std::map<std::string, std::shared_ptr<const MatrixRM>>;
  using StoredForms = std::map<std::string, std::shared_ptr<const quant::QuantizedMatrix>>;
  ReplacedWeights(std::shared_ptr<const WeightProvider> base, Replacements replacements,
                  std::string label = {}, StoredForms stored_forms = {});
  std::shared_ptr<const quant::QuantizedMatrix> storedForm(const std::string& tensor_name) const override;
  bool contains(const std::string& tensor_name) const override;
  MatrixRM matrix(const std::string& tensor_name, int64_t rows = -1, int64_t cols = -1) const override;
  std::vector<float> vector(const std::string& tensor_name, int64_t length = -1) const override;
  void embeddingRows(const std::string& tensor_name, std::span<const int32_t> ids, int64_t hidden,
                     float* out) const override;
  const Replacements& replacements() const { return replacements_; }
  const std::string& label() const { return label_; }
  // Bytes of float32 memory the replacements hold (what an in-memory variant costs while evaluating).
  uint64_t residentBytes() const;

 private:
  std::shared_ptr<const WeightProvider> base_;
  Replacements replacements_;
  std::string label_;
  StoredForms stored_forms_;
};

// The page release CheckpointWeights uses lives in core (moewb/mapped_pages.h), shared with the
// quantizer's checkpoint reader.
using moewb::releaseMappedPages;

}  // namespace moewb::engine

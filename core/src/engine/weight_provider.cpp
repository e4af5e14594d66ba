// SPDX-License-Identifier: MIT
#include "moewb/engine/weight_provider.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

#include "moewb/dtype.h"
#include "moewb/error.h"
#include "moewb/mapped_pages.h"

namespace moewb::engine {

CheckpointWeights::CheckpointWeights(std::shared_ptr<const Checkpoint> ckpt, bool release_pages)
    : ckpt_(std::move(ckpt)), release_pages_(release_pages) {}

static bool needsDescaling(DType t) {
  return t == DType::F8_E4M3 || t == DType::F8_E5M2;
}

bool CheckpointWeights::contains(const std::string& tensor_name) const {
  return ckpt_->find(tensor_name).has_value() || fusedSlice(tensor_name).has_value();
}

const ModelCatalog& CheckpointWeights::catalog() const {
  std::call_once(catalog_once_, [&] {
    catalog_ = std::make_unique<ModelCatalog>(ckpt_);
    for (std::size_t i = 0; i < catalog_->matrices().size(); ++i)
      if (catalog_->matrices()[i].slice >= 0) slice_index_.emplace(catalog_->matrices()[i].name, i);
  });
  return *catalog_;
}

std::optional<WeightMatrix> CheckpointWeights::fusedSlice(const std::string& name) const {
  // Cheap rejection first: only "<tensor>[<digits>]" names of a 3-D tensor build the catalog.
  const auto open = name.rfind('[');
  if (name.empty() || name.back() != ']' || open == std::string::npos || open + 2 >= name.size())
    return std::nullopt;
  for (std::size_t i = open + 1; i + 1 < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  const auto tensor = ckpt_->find(name.substr(0, open));
  if (!tensor || ckpt_->tensor(*tensor).shape.size() != 3) return std::nullopt;
  // The catalog's own list, so that exactly its slices (and their orientation) are served.
  const ModelCatalog& cat = catalog();
  const auto it = slice_index_.find(name);
  if (it == slice_index_.end()) return std::nullopt;
  return cat.matrices()[it->second];
}

MatrixRM CheckpointWeights::sliceMatrix(const WeightMatrix& slice) const {
  const TensorRecord& rec = ckpt_->tensor(slice.tensor);
  if (needsDescaling(rec.dtype))
    throw Error(
        fmt::format("{}: '{}' is an FP8 fused expert tensor; the engine reads fused experts in bf16, "
                    "f16 or f32 only",
                    ckpt_->root(), rec.name));
  const ModelCatalog::RawView v = catalog().rawView(slice);
  const std::size_t esize = dtypeSize(v.dtype);
  const std::size_t count = static_cast<std::size_t>(v.rows * v.cols);
  MatrixRM out(v.rows, v.cols);
  if (v.col_stride == 1 && v.row_stride == v.cols) {
    convertToFloat(v.dtype, v.data, count, out.data());
  } else if (v.row_stride == 1 && v.col_stride == v.rows) {
    // Stored input-major ([in, out], x @ W): convert the contiguous slice, then transpose.
    MatrixRM stored(v.cols, v.rows);
    convertToFloat(v.dtype, v.data, count, stored.data());
    out = stored.transpose();
  } else {
    for (int64_t r = 0; r < v.rows; ++r)
      convertToFloatStrided(v.dtype, v.data + static_cast<std::size_t>(r * v.row_stride) * esize,
                            static_cast<std::size_t>(v.cols), static_cast<std::size_t>(v.col_stride),
                            out.row(r).data());
  }
  if (release_pages_) releaseMappedPages({v.data, count * esize});
  return out;
}

std::size_t CheckpointWeights::indexOf(const std::string& tensor_name) const {
  auto i = ckpt_->find(tensor_name);
  if (!i) throw Error(fmt::format("{}: tensor '{}' not found in the checkpoint", ckpt_->root(), tensor_name));
  return *i;
}

MatrixRM CheckpointWeights::matrix(const std::string& tensor_name, int64_t rows, int64_t cols) const {
  if (!ckpt_->find(tensor_name)) {
    if (auto slice = fusedSlice(tensor_name)) {
      if ((rows >= 0 && slice->rows != rows) || (cols >= 0 && slice->cols != cols))
        throw Error(fmt::format("{}: fused expert slice '{}' is [{}, {}] ([out, in]), expected [{}, {}]",
                                ckpt_->root(), tensor_name, slice->rows, slice->cols, rows, cols));
      return sliceMatrix(*slice);
    }
  }
  const std::size_t i = indexOf(tensor_name);
  const TensorRecord& rec = ckpt_->tensor(i);
  if (rec.shape.size() != 2 || (rows >= 0 && rec.shape[0] != rows) || (cols >= 0 && rec.shape[1] != cols))
    throw Error(fmt::format("{}: tensor '{}' has shape {}, expected [{}, {}]", ckpt_->root(), tensor_name,
                            fmt::join(rec.shape, "x"), rows, cols));
  MatrixRM m(rec.shape[0], rec.shape[1]);
  auto bytes = ckpt_->bytes(i);
  if (needsDescaling(rec.dtype)) {
    auto v = ckpt_->readFloat(i);
    std::memcpy(m.data(), v.data(), v.size() * sizeof(float));
  } else {
    convertToFloat(rec.dtype, bytes.data(), static_cast<std::size_t>(m.size()), m.data());
  }
  if (release_pages_) releaseMappedPages(bytes);
  return m;
}

std::vector<float> CheckpointWeights::vector(const std::string& tensor_name, int64_t length) const {
  const std::size_t i = indexOf(tensor_name);
  const TensorRecord& rec = ckpt_->tensor(i);
  if (length >= 0 && rec.numel() != length)
    throw Error(fmt::format("{}: tensor '{}' has {} elements, expected {}", ckpt_->root(), tensor_name,
                            rec.numel(), length));
  auto bytes = ckpt_->bytes(i);
  std::vector<float> v(rec.numel());
  if (needsDescaling(rec.dtype))
    v = ckpt_->readFloat(i);
  else
    convertToFloat(rec.dtype, bytes.data(), v.size(), v.data());
  if (release_pages_) releaseMappedPages(bytes);
  return v;
}

void CheckpointWeights::embeddingRows(const std::string& tensor_name, std::span<const int32_t> ids,
                                      int64_t hidden, float* out) const {
  const std::size_t i = indexOf(tensor_name);
  const TensorRecord& rec = ckpt_->tensor(i);
  if (rec.shape.size() != 2 || rec.shape[1] != hidden)
    throw Error(fmt::format("{}: embedding '{}' has shape {}, expected [vocab, {}]", ckpt_->root(),
                            tensor_name, fmt::join(rec.shape, "x"), hidden));
  if (needsDescaling(rec.dtype)) {
    auto all = ckpt_->readFloat(i);
    for (std::size_t r = 0; r < ids.size(); ++r)
      std::memcpy(out + r * hidden, all.data() + static_cast<int64_t>(ids[r]) * hidden,
                  hidden * sizeof(float));
    return;
  }
  auto bytes = ckpt_->bytes(i);
  const std::size_t row_bytes = static_cast<std::size_t>(hidden) * dtypeSize(rec.dtype);
  for (std::size_t r = 0; r < ids.size(); ++r) {
    if (ids[r] < 0 || ids[r] >= rec.shape[0])
      throw Error(fmt::format("token id {} is outside the vocabulary of '{}' ({} rows)", ids[r], tensor_name,
                              rec.shape[0]));
    convertToFloat(rec.dtype, bytes.data() + static_cast<std::size_t>(ids[r]) * row_bytes, hidden,
                   out + r * hidden);
  }
  if (release_pages_) releaseMappedPages(bytes);
}

ReplacedWeights::ReplacedWeights(std::shared_ptr<const WeightProvider> base, Replacements replacements,
                                 std::string label, StoredForms stored_forms)
    : base_(std::move(base)),
      replacements_(std::move(replacements)),
      label_(std::move(label)),
      stored_forms_(std::move(stored_forms)) {}

std::shared_ptr<const quant::QuantizedMatrix> ReplacedWeights::storedForm(const std::string& tensor_name) const {
  auto it = stored_forms_.find(tensor_name);
  return it == stored_forms_.end() ? nullptr : it->second;
}

bool ReplacedWeights::contains(const std::string& tensor_name) const {
  return replacements_.count(tensor_name) > 0 || base_->contains(tensor_name);
}

MatrixRM ReplacedWeights::matrix(const std::string& tensor_name, int64_t rows, int64_t cols) const {
  auto it = replacements_.find(tensor_name);
  if (it == replacements_.end()) return base_->matrix(tensor_name, rows, cols);
  const MatrixRM& m = *it->second;
  if ((rows >= 0 && m.rows() != rows) || (cols >= 0 && m.cols() != cols))
    throw Error(fmt::format("replacement for '{}'{} is {}x{}, expected {}x{}", tensor_name,
                            label_.empty() ? "" : " (" + label_ + ")", m.rows(), m.cols(), rows, cols));
  return m;
}

std::vector<float> ReplacedWeights::vector(const std::string& tensor_name, int64_t length) const {
  return base_->vector(tensor_name, length);
}

void ReplacedWeights::embeddingRows(const std::string& tensor_name, std::span<const int32_t> ids,
                                    int64_t hidden, float* out) const {
  auto it = replacements_.find(tensor_name);
  if (it == replacements_.end()) return base_->embeddingRows(tensor_name, ids, hidden, out);
  const MatrixRM& m = *it->second;
  for (std::size_t r = 0; r < ids.size(); ++r)
    std::memcpy(out + r * hidden, m.row(ids[r]).data(), hidden * sizeof(float));
}

uint64_t ReplacedWeights::residentBytes() const {
  uint64_t b = 0;
  for (auto& [name, m] : replacements_) b += static_cast<uint64_t>(m->size()) * sizeof(float);
  return b;
}

}  // namespace moewb::engine

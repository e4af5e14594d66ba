// SPDX-License-Identifier: MIT
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "moewb/catalog.h"

namespace moewb::quant {

// Where quantizeModel, matrixFacts and the rank policies get their weight matrices: a checkpoint
// (CatalogSource, what every command uses) or generated matrices of a model's shapes
// (SyntheticModelSource, to measure the whole pipeline on a model nobody has to download).
// Implementations are thread-safe: the pipeline reads several matrices at once.
class MatrixSource {
 public:
  virtual ~MatrixSource() = default;
  // Every weight matrix, in the catalog's order; `matrices` arguments index into this list.
  virtual const std::vector<WeightMatrix>& matrices() const = 0;
  // What matrix `i` is (block, layer, expert): quantizableMatrices and the rank policies use it.
  virtual TensorClass classOf(std::size_t i) const = 0;
  // Matrix `i` as float [out, in].
  virtual MatrixRM read(std::size_t i) const = 0;
  // The caller holds its own float copy of matrix `i`: whatever backs the source's copy may be given
  // back (a checkpoint's mapped pages), so a model larger than memory streams through.
  virtual void release(std::size_t i) const { (void)i; }
  // Bytes matrix `i` takes in the source's format, and the whole model's bytes (untouched tensors too).
  virtual int64_t storedBytes(std::size_t i) const = 0;
  virtual int64_t totalBytes() const = 0;
  // For messages and reports: "checkpoint /path/to/model", "synthetic mixtral-8x7b".
  virtual std::string description() const = 0;
};

// A checkpoint through its catalog: read() is ModelCatalog::readMatrix, release() gives the mapped
// pages of the tensor (or expert slice) back when `release_pages`.
class CatalogSource final : public MatrixSource {
 public:
  explicit CatalogSource(const ModelCatalog& catalog, bool release_pages = true)
      : catalog_(catalog), release_pages_(release_pages) {}
  const std::vector<WeightMatrix>& matrices() const override { return catalog_.matrices(); }
  TensorClass classOf(std::size_t i) const override;
  MatrixRM read(std::size_t i) const override;
  void release(std::size_t i) const override;
  int64_t storedBytes(std::size_t i) const override;
  int64_t totalBytes() const override;
  std::string description() const override;
  const ModelCatalog& catalog() const { return catalog_; }

 private:
  const ModelCatalog& catalog_;
  bool release_pages_;
};

}  // namespace moewb::quant

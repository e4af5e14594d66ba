// SPDX-License-Identifier: MIT
#include "moewb/quant/matrix_source.h"

#include "moewb/dtype.h"
#include "moewb/mapped_pages.h"

namespace moewb::quant {

TensorClass CatalogSource::classOf(std::size_t i) const {
  return catalog_.classOf(catalog_.matrices().at(i).tensor);
}

MatrixRM CatalogSource::read(std::size_t i) const {
  return catalog_.readMatrix(catalog_.matrices().at(i));
}

void CatalogSource::release(std::size_t i) const {
  if (!release_pages_) return;
  const WeightMatrix& m = catalog_.matrices().at(i);
  if (m.slice < 0) {
    releaseMappedPages(catalog_.checkpoint().bytes(m.tensor));
    return;
  }
  // An expert slice of a fused tensor: strides are non-negative, so it spans from its first element
  // to its last one.
  const ModelCatalog::RawView v = catalog_.rawView(m);
  if (v.rows <= 0 || v.cols <= 0) return;
  const int64_t last = (v.rows - 1) * v.row_stride + (v.cols - 1) * v.col_stride;
  releaseMappedPages({v.data, std::size_t(last + 1) * dtypeSize(v.dtype)});
}

int64_t CatalogSource::storedBytes(std::size_t i) const {
  const WeightMatrix& m = catalog_.matrices().at(i);
  return m.rows * m.cols * int64_t(dtypeSize(catalog_.checkpoint().tensor(m.tensor).dtype));
}

int64_t CatalogSource::totalBytes() const {
  return int64_t(catalog_.checkpoint().totalBytes());
}

std::string CatalogSource::description() const {
  return "checkpoint " + catalog_.checkpoint().root();
}

}  // namespace moewb::quant

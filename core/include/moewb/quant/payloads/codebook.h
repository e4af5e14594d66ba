// SPDX-License-Identifier: MIT
#pragma once
// Product-quantized codes with residual stages (PQ, QET): a [rows, cols] matrix is cut into subspaces of
// d consecutive columns (m = cols / d of them); stage s gives every (row, subspace) a code into that
// subspace's codebook of k_s d-vectors, and the stages' vectors are summed:
//   W^[r, j*d + t] = sum_s C_s[j, code_s[r, j], t]
// Codebook entries are fp16, or a'-bit levels (2..16) with a per-subspace min and step in fp16 (QET's
// codebook quantization): C = min[j] + level * step[j]. Tensors and bit layouts: docs/export-format.md.
#include <cstdint>
#include <memory>
#include <vector>

#include "moewb/quant/payload.h"

namespace moewb::quant {

struct CodebookStage {
  int clusters = 0;             // k: 2..65536; codes 0..k-1 take codeBits() bits each
  std::vector<uint16_t> codes;  // [rows, m] row-major
  // The codebook [m, k, d] (entry (j, c) is the d-vector code c of subspace j stands for), either...
  int codebook_bits = 0;         // 0: fp16 `values`; 2..16: `levels` of this many bits with `min`/`step`
  std::vector<float> values;     // [m * k * d] (rounded to fp16 by CodebookPayload)
  std::vector<uint16_t> levels;  // [m * k * d], each < 2^codebook_bits
  std::vector<float> min, step;  // [m] (rounded to fp16 by CodebookPayload)

  int codeBits() const;  // ceil(log2 k), at least 1
  // Codebook entry (subspace j, code c, element t) as dequantization uses it; `subspace_width` is d.
  float entry(int64_t j, int64_t c, int64_t t, int subspace_width) const;
};

class CodebookPayload final : public MatrixPayload {
 public:
  static constexpr std::string_view kKind = "codebook";

  // Throws moewb::Error when the parts do not fit together (cols % d, code or level out of range, sizes).
  CodebookPayload(int64_t rows, int64_t cols, int subspace_width, std::vector<CodebookStage> stages);

  std::string_view kind() const override { return kKind; }
  int64_t rows() const override { return rows_; }
  int64_t cols() const override { return cols_; }
  int subspaceWidth() const { return d_; }
  int64_t subspaces() const { return cols_ / d_; }
  const std::vector<CodebookStage>& stages() const { return stages_; }

  MatrixRM dequantize() const override;
  int64_t storedBytes() const override;
  void write(PayloadWriter& writer, const std::string& key, nlohmann::json& manifest_entry) const override;

  // Bytes of stage s's tensors: packed codes, and codebook (+ its min/step when quantized).
  int64_t codeBytes(std::size_t stage) const;
  int64_t codebookBytes(std::size_t stage) const;

 private:
  int64_t rows_ = 0, cols_ = 0;
  int d_ = 0;
  std::vector<CodebookStage> stages_;
};

// The reader of kind "codebook" (registered with the built-in payload kinds).
std::shared_ptr<const MatrixPayload> readCodebookPayload(const PayloadSource& source, const std::string& key,
                                                         const nlohmann::json& manifest_entry);

}  // namespace moewb::quant

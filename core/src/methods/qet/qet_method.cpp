// SPDX-License-Identifier: MIT
// QET as a registry method: `moewb quantize --method qet --ratio 4`, quick spec `qet:4`. Stores the "qet"
// payload (moewb/methods/qet.h); `moewb eval --quantized` dequantizes it on load.
#include <fmt/format.h>

#include "moewb/methods/weight_method.h"
#include "moewb/error.h"
#include "moewb/methods/qet.h"
#include "moewb/quant/grouped_quant.h"

namespace moewb::methods {
namespace {

class QetMethod final : public WeightMethod {
 public:
  std::string_view name() const override { return "qet"; }
  std::string_view title() const override { return "QET (entanglement reorder + product quantization)"; }
  std::string_view summary() const override {
    return "QET: per-row entanglement reorder, FAISS k-means PQ with a residual stage and a'-bit codebooks, "
           "at a compression ratio";
  }
  const std::vector<OptionSpec>& options() const override { return options_; }
  std::vector<std::string> specPositionals() const override { return {"ratio"}; }
  PayloadKind payloadKind() const override { return PayloadKind::Codebook; }

  void validate(const quant::QuantizeSettings& s) const override {
    const int bits = int(integerOption(s, options_[4]));
    if (bits == 1) throw Error("qet: --codebook-bits 1 (expected 0 for fp16 codebooks, or 2..16)");
  }

  PredictedSize predictedSize(const quant::QuantizeSettings& s, int64_t rows, int64_t cols,
                              int) const override {
    const qet::Config c = config(s, cols);
    try {
      return {qet::plan(rows, cols, c).totalBytes(), 0};
    } catch (const Error&) {
      return {int64_t(double(rows * cols * c.original_bits / 8) / c.ratio), 0};
    }
  }

  quant::QuantizedMatrix quantize(const MatrixRM& w, const quant::QuantizeSettings& s, int, uint64_t seed,
                                  int threads, const IterationCallback&,
                                  const quant::MatrixHessian*) const override {
    const qet::Config c = config(s, w.cols());
    const qet::FaissThreads faiss_threads(threads);
    quant::QuantizedMatrix q;
    q.method = s.method;
    q.source.rows = w.rows();
    q.source.cols = w.cols();
    q.payload = qet::quantize(w, c, seed);
    q.rel_error = quant::relativeError(w, q.payload->dequantize());
    q.rel_error_float_compensators = q.rel_error;
    q.kurtosis = quant::excessKurtosis(w);
    q.bytes = q.payload->storedBytes();
    return q;
  }

 private:
  // The settings of one matrix: fewer levels where its columns are not divisible by 2^levels.
  qet::Config config(const quant::QuantizeSettings& s, int64_t cols) const {
    qet::Config c;
    c.ratio = realOption(s, options_[0]);
    c.levels = int(integerOption(s, options_[1]));
    c.stages = int(integerOption(s, options_[2]));
    c.first_stage_share = realOption(s, options_[3]);
    c.codebook_bits = int(integerOption(s, options_[4]));
    c.subspace_width = int(integerOption(s, options_[5]));
    c.original_bits = int(integerOption(s, options_[6]));
    c.kmeans_iters = int(integerOption(s, options_[7]));
    while (c.levels > 0 && cols % (int64_t(1) << c.levels) != 0) --c.levels;
    return c;
  }

  std::vector<OptionSpec> options_ = {
      OptionSpec{.name = "ratio",
                 .type = OptionType::Real,
                 .label = "Compression ratio θ",
                 .help =
                     "original bytes (at --original-bits per weight) over everything stored: indicator maps, "
                     "codes, codebooks",
                 .default_value = "4",
                 .min = 1,
                 .max = 64},
      OptionSpec{.name = "levels",
                 .type = OptionType::Integer,
                 .label = "Entanglement levels",
                 .help =
                     "levels l of the per-row reorder of the first stage (l/2 indicator bits per weight; 0: "
                     "plain PQ)",
                 .default_value = "3",
                 .min = 0,
                 .max = 6},
      OptionSpec{
          .name = "residual-stages",
          .type = OptionType::Integer,
          .label = "Stages (RQO)",
          .help = "quantization stages r: the first and r-1 residual stages, not reordered (1: no RQO)",
          .default_value = "2",
          .min = 1,
          .max = 4},
      OptionSpec{.name = "memory-split",
                 .type = OptionType::Real,
                 .label = "First stage's share",
                 .help = "share of the memory left after the indicator maps that the first stage takes; the "
                         "residual stages share the rest",
                 .default_value = "0.7",
                 .min = 0.05,
                 .max = 1},
      OptionSpec{.name = "codebook-bits",
                 .type = OptionType::Integer,
                 .label = "Codebook bits a' (CQO)",
                 .help = "codebook values as a'-bit levels with an fp16 min and step per subspace (0: fp16 "
                         "codebooks)",
                 .default_value = "10",
                 .min = 0,
                 .max = 16},
      OptionSpec{.name = "subspace-width",
                 .type = OptionType::Integer,
                 .label = "Subspace width d",
                 .help = "columns per subspace (a divisor of every matrix's columns)",
                 .default_value = "8",
                 .min = 1,
                 .max = 256},
      OptionSpec{.name = "original-bits",
                 .type = OptionType::Integer,
                 .label = "Original bits per weight",
                 .help =
                     "bits per weight the ratio counts the original at (16: a bf16/fp16 checkpoint; 32: as "
                     "the QET paper counts)",
                 .default_value = "16",
                 .choices = {"16", "32"}},
      OptionSpec{.name = "kmeans-iters",
                 .type = OptionType::Integer,
                 .label = "k-means iterations",
                 .help = "FAISS k-means iterations per subspace",
                 .default_value = "20",
                 .min = 1,
                 .max = 200},
  };
};

}  // namespace

std::unique_ptr<WeightMethod> makeQetMethod() {
  return std::make_unique<QetMethod>();
}

}  // namespace moewb::methods

// SPDX-License-Identifier: MIT
// qmoe-sub1: QMoE's sub-1-bit code. The ternary codes are qmoe-ternary's (qmoe_common.h: same options,
// same GPTQ rounding, same row levels); what changes is the dictionary of the payload: one dictionary
// for the whole model, learned from the pair statistics of every matrix's codes with QMoE's priority-
// queue (Tunstall) construction (learnTernaryDictionary), and every matrix re-encoded with it by greedy
// longest match. The codes decode bit for bit to qmoe-ternary's.
//
// The dictionary depends on all matrices, so it is made in the model step (finishModel): quantize()
// stores a matrix with qmoe-ternary's fixed dictionary, finishModel counts the pairs of all of them,
// builds the dictionary and re-encodes each matrix, keeping the fixed dictionary instead when the
// learned one stores the model in more bytes (dense codes: alpha fit). Measures per matrix, besides
// qmoe-ternary's code statistics:
//   bits_per_weight         everything stored (stream, offsets, row levels) plus the matrix's share of
//                           the dictionary (the dictionary's bytes times its share of the coded weights)
//   stream_bits_per_weight  the u16 codeword indices alone
//   dictionary_share_bytes  that share
//   dictionary_learned      1, or 0 when the fixed dictionary was kept
//   entropy_rate_ratio      code_entropy_bits / bits_per_weight: the fraction of the entropy-limit
//                           compression the stored form reaches (QMoE's Table 3 entropy is that of the
//                           ternary codes, as code_entropy_bits)
#include <fmt/format.h>

#include <atomic>
#include <mutex>

#include "moewb/methods/weight_method.h"
#include "../gptq/gptq_method_common.h"
#include "moewb/error.h"
#include "moewb/parallel.h"
#include "qmoe_common.h"

namespace moewb::methods {
namespace {

OptionSpec entriesOption() {
  return {.name = "entries",
          .type = OptionType::Integer,
          .label = "Dictionary codewords",
          .help =
              "qmoe-sub1: codewords of the learned dictionary (9..65536; indices stay u16, so fewer only "
              "shrink the dictionary, 8 bytes each, stored once per export)",
          .default_value = "65536",
          .min = 9,
          .max = 65536,
          .choices = {},
          .read = {},
          .write = {}};
}

class QmoeSub1Method final : public WeightMethod {
 public:
  std::string_view name() const override { return "qmoe-sub1"; }
  std::string_view title() const override { return "QMoE sub-1-bit (ternary + learned dictionary)"; }
  std::string_view summary() const override {
    return "QMoE's ternary GPTQ codes (as qmoe-ternary) written with one dictionary of up to 2^16 codewords "
           "learned from all matrices' codes; sub-1-bit with --alpha max (needs --calib)";
  }
  const std::vector<OptionSpec>& options() const override { return options_; }
  MethodNeeds needs() const override { return MethodNeeds::CalibrationHessians; }
  PayloadKind payloadKind() const override { return PayloadKind::Dictionary; }
  void validate(const quant::QuantizeSettings& s) const override { qmoe::fixedAlpha(*this, s); }
  // Before the model step the size is not known: qmoe-ternary's fixed-dictionary size, an estimate.
  PredictedSize predictedSize(const quant::QuantizeSettings&, int64_t rows, int64_t cols,
                              int) const override {
    return {qmoe::uniformStoredBytes(rows, cols), 0};
  }

  quant::QuantizedMatrix quantize(const MatrixRM& w, const quant::QuantizeSettings& s, int, uint64_t, int,
                                  const IterationCallback&,
                                  const quant::MatrixHessian* calibration) const override {
    return qmoe::storeTernary(w, s, qmoe::roundTernary(*this, w, s, calibration), qmoe::uniformEncoder(),
                              calibration);
  }

  bool hasModelStep() const override { return true; }

  void finishModel(quant::ModelQuantization& model, const ProgressFn& progress) const override {
    std::vector<std::size_t> items;
    for (std::size_t i = 0; i < model.matrices.size(); ++i) {
      const auto& q = model.matrices[i];
      if (q.method == name() && dynamic_cast<const quant::TernaryDictionaryPayload*>(q.payload.get()))
        items.push_back(i);
    }
    if (items.empty()) return;
    auto payloadOf = [&](std::size_t k) -> const quant::TernaryDictionaryPayload& {
      return static_cast<const quant::TernaryDictionaryPayload&>(*model.matrices[items[k]].payload);
    };
    if (progress && !progress(0.0, "qmoe-sub1: counting ternary pairs")) throw Cancelled{};
    // The pairs as stored (an odd row's padding pair included), read off the codewords of the stream.
    std::array<uint64_t, 9> counts{};
    double total_weights = 0;
    for (std::size_t k = 0; k < items.size(); ++k) {
      const auto& p = payloadOf(k);
      std::vector<uint64_t> per_word(std::size_t(p.dictionary()->size()), 0);
      for (uint16_t index : p.stream()) ++per_word[index];
      for (std::size_t e = 0; e < per_word.size(); ++e)
        if (per_word[e] > 0)
          for (uint8_t sym : p.dictionary()->entry(int64_t(e))) counts[sym] += per_word[e];
      total_weights += double(p.rows() * p.cols());
    }
    const int64_t entries = integerOption(model.settings, *option("entries"));
    const quant::TernaryEncoder encoder(quant::learnTernaryDictionary(counts, entries));
    std::vector<std::shared_ptr<const quant::TernaryDictionaryPayload>> learned(items.size());
    std::atomic<std::size_t> done{0};
    std::mutex report_mutex;
    parallelFor(
        items.size(),
        [&](std::size_t k) {
          learned[k] = encoder.encode(qmoe::decodeTernary(payloadOf(k)));
          const std::size_t finished = ++done;
          std::lock_guard lock(report_mutex);
          if (progress && !progress(double(finished) / double(items.size()),
                                    fmt::format("qmoe-sub1: {}: encoded with the learned dictionary",
                                                model.matrices[items[k]].source.name)))
            throw Cancelled{};
        },
        model.settings.threads);
    // Codes near log2(3) bits of entropy (alpha fit) gain nothing from a learned dictionary, and a
    // greedy match over it can cost more than the fixed 5-pair one: keep whichever stores the model
    // in fewer bytes (the codes are the same either way).
    int64_t learned_bytes = encoder.dictionary()->storedBytes(), fixed_bytes = 0;
    for (std::size_t k = 0; k < items.size(); ++k) {
      learned_bytes += learned[k]->storedBytes();
      fixed_bytes += payloadOf(k).storedBytes();
    }
    fixed_bytes += payloadOf(0).dictionary()->storedBytes();  // quantize() stores all with the one fixed dictionary
    const bool use_learned = learned_bytes <= fixed_bytes;
    const double dictionary_bytes =
        double(use_learned ? encoder.dictionary()->storedBytes() : payloadOf(0).dictionary()->storedBytes());
    for (std::size_t k = 0; k < items.size(); ++k) {
      quant::QuantizedMatrix& q = model.matrices[items[k]];
      if (use_learned) q.payload = learned[k];
      learned[k].reset();
      const auto& payload = payloadOf(k);
      const double n = double(payload.rows() * payload.cols());
      const double share = dictionary_bytes * n / total_weights;
      q.bytes = payload.storedBytes();
      const double bits = 8.0 * (double(q.bytes) + share) / n;
      q.measures["dictionary_learned"] = use_learned ? 1.0 : 0.0;
      q.measures["bits_per_weight"] = bits;
      q.measures["stream_bits_per_weight"] = 16.0 * double(payload.stream().size()) / n;
      q.measures["dictionary_share_bytes"] = share;
      if (const auto it = q.measures.find("code_entropy_bits"); it != q.measures.end())
        q.measures["entropy_rate_ratio"] = it->second / bits;
    }
    if (progress &&
        !progress(1.0, use_learned ? fmt::format("qmoe-sub1: learned dictionary of {} codewords: {} bytes "
                                                 "(the fixed one: {})",
                                                 encoder.dictionary()->size(), learned_bytes, fixed_bytes)
                                   : fmt::format("qmoe-sub1: the learned dictionary takes {} bytes, the fixed "
                                                 "one {}: kept the fixed one",
                                                 learned_bytes, fixed_bytes)))
      throw Cancelled{};
  }

 private:
  std::vector<OptionSpec> options_ = {gptq::dampOption(), gptq::actOrderOption(), qmoe::roundingOption(),
                                      qmoe::alphaOption("max"), entriesOption()};
};

}  // namespace

std::unique_ptr<WeightMethod> makeQmoeSub1Method() {
  return std::make_unique<QmoeSub1Method>();
}

}  // namespace moewb::methods

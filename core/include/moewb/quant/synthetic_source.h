// SPDX-License-Identifier: MIT
#pragma once
// Generated weight matrices of a real model's shapes, fed to quantizeModel through the same MatrixSource
// seam as a checkpoint: measures the whole pipeline (batching, streaming, policies, storage) on a model
// nobody has to download, e.g. the Mixtral-8x7B acceptance run (`moewb bench quantize --synthetic`).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moewb/dtype.h"
#include "moewb/quant/matrix_source.h"

namespace moewb::quant {

// A Mixtral-style decoder: per layer attention q, k, v, o and `experts` experts with w1 (gate), w2
// (down), w3 (up), named as Hugging Face names them.
struct SyntheticModelSpec {
  std::string name;
  int layers = 32;
  int experts = 8;
  int64_t hidden = 4096;         // q, o: hidden x hidden; the input of every matrix but w2
  int64_t kv_dim = 1024;         // k, v: kv_dim x hidden (grouped-query attention)
  int64_t intermediate = 14336;  // w1, w3: intermediate x hidden; w2: hidden x intermediate
  int64_t vocab = 32000;         // embeddings and LM head: not quantized, counted in the model's bytes
  DType dtype = DType::BF16;     // what the checkpoint would store (the "original" bytes)
  uint64_t seed = 1;
};

// "mixtral-8x7b" (the acceptance model: 32 layers x 8 experts) and "tiny-mixtral" (the demo model's
// shapes: 4 layers x 8 experts, hidden 256; for tests).
std::optional<SyntheticModelSpec> syntheticModelPreset(std::string_view name);
std::vector<std::string> syntheticModelPresetNames();

// Matrix values: sigma * z with sigma = 1 / sqrt(in features) and z a zero-mean, unit-variance
// Irwin-Hall(3) variable, except that 1% of the values (chosen at random) are `outlierScale(i)` times
// larger. The scale, drawn per matrix in [1, 3.5], spreads the excess kurtosis over about -0.4 .. 2.2,
// so kurtosis rank policies give different matrices different ranks, as they do on real checkpoints.
// Every value is a hash of (seed, matrix, position): read() is deterministic, thread-safe and needs
// no storage, so a model of any size streams.
class SyntheticModelSource final : public MatrixSource {
 public:
  explicit SyntheticModelSource(SyntheticModelSpec spec);
  const std::vector<WeightMatrix>& matrices() const override { return matrices_; }
  TensorClass classOf(std::size_t i) const override { return classes_.at(i); }
  MatrixRM read(std::size_t i) const override;
  int64_t storedBytes(std::size_t i) const override;
  int64_t totalBytes() const override;
  std::string description() const override { return "synthetic " + spec_.name; }
  const SyntheticModelSpec& spec() const { return spec_; }
  double outlierScale(std::size_t i) const;

 private:
  SyntheticModelSpec spec_;
  std::vector<WeightMatrix> matrices_;
  std::vector<TensorClass> classes_;
};

}  // namespace moewb::quant

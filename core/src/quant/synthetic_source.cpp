// SPDX-License-Identifier: MIT
#include "moewb/quant/synthetic_source.h"

#include <fmt/format.h>

#include <cmath>

#include "moewb/error.h"

namespace moewb::quant {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// splitmix64's finaliser: a cheap hash whose outputs pass as independent uniform 64-bit numbers.
inline uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t matrixKey(uint64_t seed, std::size_t i) {
  return mix(mix(seed) + kGolden * (uint64_t(i) + 1));
}

}  // namespace

std::optional<SyntheticModelSpec> syntheticModelPreset(std::string_view name) {
  if (name == "mixtral-8x7b") {
    SyntheticModelSpec s;
    s.name = "mixtral-8x7b";
    return s;
  }
  if (name == "tiny-mixtral") {
    SyntheticModelSpec s;
    s.name = "tiny-mixtral";
    s.layers = 4;
    s.hidden = 256;
    s.kv_dim = 128;
    s.intermediate = 512;
    s.vocab = 4096;
    return s;
  }
  return std::nullopt;
}

std::vector<std::string> syntheticModelPresetNames() {
  return {"mixtral-8x7b", "tiny-mixtral"};
}

SyntheticModelSource::SyntheticModelSource(SyntheticModelSpec spec) : spec_(std::move(spec)) {
  if (spec_.layers < 1 || spec_.experts < 1 || spec_.hidden < 1 || spec_.kv_dim < 1 || spec_.intermediate < 1)
    throw Error(fmt::format("synthetic model '{}': layers, experts and every dimension must be positive",
                            spec_.name));
  auto add = [this](std::string name, int64_t rows, int64_t cols, TensorClass c) {
    WeightMatrix m;
    m.tensor = matrices_.size();
    m.rows = rows;
    m.cols = cols;
    m.name = std::move(name);
    matrices_.push_back(std::move(m));
    classes_.push_back(c);
  };
  for (int l = 0; l < spec_.layers; ++l) {
    const std::string attn = fmt::format("model.layers.{}.self_attn.", l);
    const struct {
      const char* name;
      Proj proj;
      int64_t rows;
    } attention[] = {{"q_proj", Proj::Q, spec_.hidden},
                     {"k_proj", Proj::K, spec_.kv_dim},
                     {"v_proj", Proj::V, spec_.kv_dim},
                     {"o_proj", Proj::O, spec_.hidden}};
    for (const auto& a : attention)
      add(attn + a.name + ".weight", a.rows, spec_.hidden,
          TensorClass{.layer = l, .block = Block::Attention, .proj = a.proj});
    for (int e = 0; e < spec_.experts; ++e) {
      const std::string expert = fmt::format("model.layers.{}.block_sparse_moe.experts.{}.", l, e);
      const TensorClass c{.layer = l, .block = Block::Expert, .expert = e};
      TensorClass gate = c, down = c, up = c;
      gate.proj = Proj::Gate;
      down.proj = Proj::Down;
      up.proj = Proj::Up;
      add(expert + "w1.weight", spec_.intermediate, spec_.hidden, gate);
      add(expert + "w2.weight", spec_.hidden, spec_.intermediate, down);
      add(expert + "w3.weight", spec_.intermediate, spec_.hidden, up);
    }
  }
}

double SyntheticModelSource::outlierScale(std::size_t i) const {
  const uint64_t h = mix(matrixKey(spec_.seed, i) ^ 0x5CA1Eull);
  return 1.0 + 2.5 * double(h >> 11) / double(uint64_t(1) << 53);
}

MatrixRM SyntheticModelSource::read(std::size_t i) const {
  const WeightMatrix& m = matrices_.at(i);
  MatrixRM w(m.rows, m.cols);
  const uint64_t key = matrixKey(spec_.seed, i);
  const float sigma = float(1.0 / std::sqrt(double(m.cols)));
  const float big = float(sigma * outlierScale(i));
  constexpr uint64_t kOutlier = 655;  // of 65536: 1%
  float* p = w.data();
  const int64_t n = w.size();
  for (int64_t j = 0; j < n; ++j) {
    const uint64_t h = mix(key + kGolden * uint64_t(j));
    // Three 16-bit uniforms summed (mean 3 * 32767.5 + 1.5 = 3 * 32768 after the offset), scaled to unit
    // variance; the top 16 bits pick the 1% outliers.
    const float sum = float(h & 0xFFFF) + float((h >> 16) & 0xFFFF) + float((h >> 32) & 0xFFFF) + 1.5f;
    const float z = sum * (2.0f / 65536.0f) - 3.0f;
    p[j] = z * ((h >> 48) < kOutlier ? big : sigma);
  }
  return w;
}

int64_t SyntheticModelSource::storedBytes(std::size_t i) const {
  const WeightMatrix& m = matrices_.at(i);
  return m.rows * m.cols * int64_t(dtypeSize(spec_.dtype));
}

int64_t SyntheticModelSource::totalBytes() const {
  // The quantized matrices plus what a Mixtral checkpoint also holds: embeddings and LM head, a router
  // and two norms per layer, the final norm.
  int64_t elements = 2 * spec_.vocab * spec_.hidden + spec_.hidden;
  elements += int64_t(spec_.layers) * (int64_t(spec_.experts) * spec_.hidden + 2 * spec_.hidden);
  int64_t total = elements * int64_t(dtypeSize(spec_.dtype));
  for (std::size_t i = 0; i < matrices_.size(); ++i) total += storedBytes(i);
  return total;
}

}  // namespace moewb::quant

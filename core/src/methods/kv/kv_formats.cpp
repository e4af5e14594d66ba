// SPDX-License-Identifier: MIT
// The built-in KV-cache formats: fp16, uniform asymmetric int8/int4/int2 and KIVI-style kivi-2/kivi-4.
//
// Integer formats (docs/kv-cache.md): keys are quantized per channel over the chunk's tokens (one scale and
// zero per (kv head, channel) of a chunk), values per token in groups of `group` consecutive channels of one
// head (a group never spans two heads: the group is min(group, head_dim), the last group of a head is
// shorter when head_dim is not a multiple). Asymmetric min/max: zero = fp16(min), scale =
// fp16((max - min) / (2^bits - 1)), code = clamp(round((x - zero) / scale), 0, 2^bits - 1), x^ = code *
// scale + zero, in double. Scales and zeros are stored in fp16, which is why they are rounded first.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "moewb/methods/kv_method.h"
#include "moewb/dtype.h"
#include "moewb/error.h"

namespace moewb::methods {

double roundToHalf(double x) {
  constexpr double kMaxHalf = 65504.0;
  if (x == 0 || std::isnan(x)) return x;
  const double a = std::fabs(x);
  if (a >= kMaxHalf) return std::copysign(kMaxHalf, x);
  // 11 significant bits; below 2^-14 the spacing stays 2^-24 (subnormals). Scaling by a power of two is
  // exact, so nearbyint (ties to even) does the only rounding.
  const int e = std::max(std::ilogb(a), -14);
  const double step = std::ldexp(1.0, e - 10);
  return std::copysign(std::min(std::nearbyint(a / step) * step, kMaxHalf), x);
}

namespace {

constexpr int64_t kMetaBits = 16;  // fp16 scale, fp16 zero

// Quantizes `n` values at `stride` in place (see the file comment).
void quantizeGroup(float* x, int64_t n, int64_t stride, int bits) {
  if (n <= 0) return;
  float lo = x[0], hi = x[0];
  for (int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, x[i * stride]);
    hi = std::max(hi, x[i * stride]);
  }
  const double levels = double((1 << bits) - 1);
  const double zero = roundToHalf(lo);
  const double scale = roundToHalf((double(hi) - double(lo)) / levels);
  for (int64_t i = 0; i < n; ++i) {
    float& v = x[i * stride];
    const double code = scale > 0 ? std::clamp(std::nearbyint((double(v) - zero) / scale), 0.0, levels) : 0.0;
    v = static_cast<float>(code * scale + zero);
  }
}

int64_t packedCodeBits(int bits, int64_t tokens, int kv_heads, int head_dim) {
  const int64_t raw = int64_t(bits) * tokens * kv_heads * head_dim;
  return (raw + 7) / 8 * 8;  // a chunk's codes start on a byte
}

class Fp16KvMethod final : public KvMethod {
 public:
  std::string_view name() const override { return "fp16"; }
  std::string_view title() const override { return "FP16 (no quantization)"; }
  std::string_view summary() const override { return "keys and values rounded to half precision, 16 bits each"; }
  const std::vector<OptionSpec>& options() const override {
    static const std::vector<OptionSpec> none;
    return none;
  }
  void quantizeChunk(const KvChunk& c, const KvSettings&) const override {
    const int64_t width = int64_t(c.kv_heads) * c.head_dim;
    for (int64_t t = 0; t < c.tokens; ++t) {
      float* row = c.data + t * c.row_stride;
      for (int64_t i = 0; i < width; ++i) row[i] = halfToFloat(floatToHalf(row[i]));
    }
  }
  int64_t storedBits(KvTensor, int64_t tokens, int kv_heads, int head_dim, const KvSettings&) const override {
    return 16 * tokens * kv_heads * head_dim;
  }
};

// int8/int4/int2 and kivi-2/kivi-4: the same arithmetic; KIVI adds the fp16 residual window and uses a
// smaller value group by default (its G = 32).
class UniformKvMethod final : public KvMethod {
 public:
  UniformKvMethod(std::string name, int bits, bool kivi) : name_(std::move(name)), bits_(bits), kivi_(kivi) {
    title_ = kivi ? fmt::format("KIVI {}-bit (fp16 residual window)", bits)
                  : fmt::format("INT{} (keys per channel, values per token)", bits);
    summary_ = kivi ? fmt::format("KIVI-style {}-bit: keys per channel over each chunk, values per token in "
                                  "groups of channels, the last `residual` tokens of a sequence kept in fp16",
                                  bits)
                    : fmt::format("asymmetric {}-bit: keys per channel over each chunk, values per token in "
                                  "groups of channels; fp16 scales and zeros",
                                  bits);
    OptionSpec group;
    group.name = "group";
    group.type = OptionType::Integer;
    group.label = "Value group";
    group.help = "Channels of one head that share a value scale and zero (capped at the head dimension)";
    group.default_value = kivi ? "32" : "128";
    group.min = 32;
    group.max = 128;
    group.choices = {"32", "64", "128"};
    options_.push_back(group);
    if (kivi) {
      OptionSpec residual;
      residual.name = "residual";
      residual.type = OptionType::Integer;
      residual.label = "Residual window";
      residual.help = "Most recent tokens of a sequence kept in fp16 (whole chunks reaching into them)";
      residual.default_value = "32";
      residual.min = 0;
      residual.max = 1 << 20;
      options_.push_back(residual);
    }
  }
  std::string_view name() const override { return name_; }
  std::string_view title() const override { return title_; }
  std::string_view summary() const override { return summary_; }
  const std::vector<OptionSpec>& options() const override { return options_; }
  int64_t residualTokens(const KvSettings& s) const override {
    return kivi_ ? integerOption(s.extra, options_[1]) : 0;
  }

  void quantizeChunk(const KvChunk& c, const KvSettings& s) const override {
    if (c.tensor == KvTensor::Keys) {
      // One group per (head, channel): the chunk's tokens down a column.
      const int64_t width = int64_t(c.kv_heads) * c.head_dim;
      for (int64_t i = 0; i < width; ++i) quantizeGroup(c.data + i, c.tokens, c.row_stride, bits_);
      return;
    }
    const int group = valueGroup(s, c.head_dim);
    for (int64_t t = 0; t < c.tokens; ++t)
      for (int h = 0; h < c.kv_heads; ++h) {
        float* head = c.data + t * c.row_stride + int64_t(h) * c.head_dim;
        for (int d = 0; d < c.head_dim; d += group) quantizeGroup(head + d, std::min(group, c.head_dim - d), 1, bits_);
      }
  }

  int64_t storedBits(KvTensor tensor, int64_t tokens, int kv_heads, int head_dim,
                     const KvSettings& s) const override {
    const int64_t codes = packedCodeBits(bits_, tokens, kv_heads, head_dim);
    if (tensor == KvTensor::Keys) return codes + 2 * kMetaBits * kv_heads * head_dim;
    const int group = valueGroup(s, head_dim);
    const int64_t groups_per_head = (head_dim + group - 1) / group;
    return codes + 2 * kMetaBits * tokens * kv_heads * groups_per_head;
  }

 private:
  int valueGroup(const KvSettings& s, int head_dim) const {
    return static_cast<int>(std::min<long long>(integerOption(s.extra, options_[0]), head_dim));
  }

  std::string name_, title_, summary_;
  int bits_;
  bool kivi_;
  std::vector<OptionSpec> options_;
};

}  // namespace

const OptionSpec* KvMethod::option(std::string_view option_name) const {
  for (const OptionSpec& spec : options())
    if (spec.name == option_name) return &spec;
  return nullptr;
}

KvSettings KvMethod::defaults() const {
  KvSettings s;
  s.method = std::string(name());
  for (const OptionSpec& spec : options()) setOption(spec, s.extra, spec.default_value, spec.name);
  return s;
}

std::string KvFormat::label() const {
  if (!method) return "none";
  std::string out(method->name());
  for (const OptionSpec& spec : method->options()) {
    const std::string value = optionValue(spec, settings.extra);
    if (value != spec.default_value) out += fmt::format(":{}={}", spec.name, value);
  }
  return out;
}

std::vector<std::unique_ptr<KvMethod>> makeBuiltinKvMethods() {
  std::vector<std::unique_ptr<KvMethod>> out;
  out.push_back(std::make_unique<Fp16KvMethod>());
  for (int bits : {8, 4, 2}) out.push_back(std::make_unique<UniformKvMethod>(fmt::format("int{}", bits), bits, false));
  for (int bits : {2, 4}) out.push_back(std::make_unique<UniformKvMethod>(fmt::format("kivi-{}", bits), bits, true));
  return out;
}

}  // namespace moewb::methods

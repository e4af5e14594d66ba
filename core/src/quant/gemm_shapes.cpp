// SPDX-License-Identifier: MIT
#include "moewb/quant/gemm_shapes.h"

#include <fmt/format.h>

#include <charconv>
#include <map>
#include <utility>

#include "moewb/error.h"
#include "moewb/quant/model_quantizer.h"

namespace moewb::quant {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A positive integer filling all of `s` (no sign, no exponent), or 0.
int64_t positiveInteger(std::string_view s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size() && v > 0 ? v : 0;
}

}  // namespace

GemmShape parseGemmShape(std::string_view text, std::string_view option) {
  const std::string_view t = trim(text);
  // The separator: 'x', 'X' or the multiplication sign (UTF-8 C3 97), as the GUI shows shapes.
  std::size_t at = t.find_first_of("xX"), len = 1;
  if (const std::size_t times = t.find("\xC3\x97"); times != std::string_view::npos && times < at) {
    at = times;
    len = 2;
  }
  GemmShape s;
  if (at != std::string_view::npos) {
    s.n = positiveInteger(trim(t.substr(0, at)));
    s.k = positiveInteger(trim(t.substr(at + len)));
  }
  if (s.n == 0 || s.k == 0)
    throw Error(fmt::format("{}: expected NxK (out x in features, two positive integers, e.g. 14336x4096), got '{}'",
                            option, text));
  return s;
}

std::vector<GemmShape> defaultBenchGemmShapes() { return {{14336, 4096}, {4096, 14336}, {1408, 2048}, {2048, 1408}}; }

bool w3a16KernelTakes(const GemmShape& shape) {
  return shape.n > 0 && shape.k > 0 && shape.n % 64 == 0 && shape.k % 64 == 0;
}

std::vector<ModelGemmShape> modelGemmShapes(const ModelCatalog& catalog, const TensorFilter& filter) {
  if (filter.usesStats())
    throw Error(fmt::format("filter '{}': weight statistics are not computed for the benchmark's shapes; "
                            "filter on name, layer, block, proj, expert, dtype, rows, cols or numel",
                            filter.text()));
  std::vector<ModelGemmShape> shapes;
  std::map<std::pair<int64_t, int64_t>, std::size_t> index;  // (n, k) -> shapes[i]
  // Per shape: kinds ("block proj") in order of first appearance, with counts.
  std::vector<std::vector<std::pair<std::string, int64_t>>> kinds;
  for (const std::size_t i : quantizableMatrices(catalog)) {
    const WeightMatrix& m = catalog.matrices()[i];
    if (!filter.matches(makeRowFields(catalog, m))) continue;
    const auto [it, added] = index.emplace(std::pair{m.rows, m.cols}, shapes.size());
    if (added) {
      shapes.push_back({GemmShape{m.rows, m.cols}, 0, m.name, {}});
      kinds.emplace_back();
    }
    ++shapes[it->second].matrices;
    const TensorClass& c = catalog.classOf(m.tensor);
    std::string kind(blockName(c.block));
    if (c.proj != Proj::None) kind += fmt::format(" {}", projName(c.proj));
    auto& list = kinds[it->second];
    auto k = list.begin();
    while (k != list.end() && k->first != kind) ++k;
    if (k == list.end())
      list.emplace_back(kind, 1);
    else
      ++k->second;
  }
  for (std::size_t s = 0; s < shapes.size(); ++s)
    for (const auto& [kind, count] : kinds[s])
      shapes[s].kinds += fmt::format("{}{} \u00D7{}", shapes[s].kinds.empty() ? "" : ", ", kind, count);
  return shapes;
}

std::string describeModelGemmShape(const ModelGemmShape& s) {
  return fmt::format("{}x{}: {} matri{}, {} ({})", s.shape.n, s.shape.k, s.matrices, s.matrices == 1 ? "x" : "ces",
                     s.kinds, s.first_tensor);
}

}  // namespace moewb::quant

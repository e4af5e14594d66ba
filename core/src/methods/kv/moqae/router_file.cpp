// SPDX-License-Identifier: MIT
// ROUTER.json: MoQAE's routers and their settings (format in docs/kv-cache.md#moqae). Reading checks every
// key and shape and names the file and the key in its errors, so a hand-edited or truncated file never
// reaches the engine.
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "moewb/atomic_file.h"
#include "moewb/error.h"
#include "moewb/methods/moqae.h"

namespace moewb::methods::moqae {

namespace {

constexpr const char* kFormatName = "moewb-moqae-router";
constexpr int kFormatVersion = 1;

nlohmann::json matrixToJson(const Eigen::MatrixXd& m) {
  nlohmann::json rows = nlohmann::json::array();
  for (Eigen::Index r = 0; r < m.rows(); ++r) {
    nlohmann::json row = nlohmann::json::array();
    for (Eigen::Index c = 0; c < m.cols(); ++c) row.push_back(m(r, c));
    rows.push_back(std::move(row));
  }
  return rows;
}

// Reads JSON with the origin (file) and key path in every message.
struct Reader {
  std::string origin;
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(fmt::format("{}: {}: {}", origin, key, what));
  }
  const nlohmann::json& at(const nlohmann::json& j, const std::string& key, const std::string& path) const {
    if (!j.is_object() || !j.contains(key)) fail(path, "missing");
    return j.at(key);
  }
  int64_t integer(const nlohmann::json& j, const std::string& key, int64_t lo, int64_t hi) const {
    const auto& v = at(j, key, key);
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      fail(key, fmt::format("expected an integer in {}..{}, got {}", lo, hi, v.dump()));
    return v.get<int64_t>();
  }
  double number(const nlohmann::json& v, const std::string& path) const {
    if (!v.is_number() || !std::isfinite(v.get<double>())) fail(path, fmt::format("expected a finite number, got {}", v.dump()));
    return v.get<double>();
  }
  Eigen::MatrixXd matrix(const nlohmann::json& v, const std::string& path, int rows, int cols) const {
    const std::string shape = fmt::format("expected {} rows of {} numbers", rows, cols);
    if (!v.is_array() || static_cast<int>(v.size()) != rows) fail(path, shape);
    Eigen::MatrixXd m(rows, cols);
    for (int r = 0; r < rows; ++r) {
      if (!v[r].is_array() || static_cast<int>(v[r].size()) != cols) fail(fmt::format("{}[{}]", path, r), shape);
      for (int c = 0; c < cols; ++c) m(r, c) = number(v[r][c], fmt::format("{}[{}][{}]", path, r, c));
    }
    return m;
  }
};

}  // namespace

nlohmann::json routerSetToJson(const RouterSet& set) {
  nlohmann::json configs = nlohmann::json::array(), bits = nlohmann::json::array();
  for (int j = 0; j < set.configCount(); ++j) {
    configs.push_back(set.configs[j].spec);
    bits.push_back(set.configBits(j));
  }
  nlohmann::json routers = nlohmann::json::array();
  for (const Router& r : set.routers) {
    nlohmann::json layers = nlohmann::json::array();
    for (int l = r.layer; l < std::min(set.layers, r.layer + set.share); ++l) layers.push_back(l);
    routers.push_back({{"layer", r.layer},
                       {"layers", layers},
                       {"input_scale", r.input_scale},
                       {"w1", matrixToJson(r.w1)},
                       {"w2", matrixToJson(r.w2)},
                       {"w3", matrixToJson(r.w3)}});
  }
  return {{"format", kFormatName},
          {"version", kFormatVersion},
          {"features", "keys after RoPE averaged over the KV heads, divided by input_scale (one row per token)"},
          {"configs", configs},
          {"config_bits", bits},
          {"chunk", set.chunk_tokens},
          {"share", set.share},
          {"freeze", set.freeze},
          {"model", {{"layers", set.layers}, {"kv_heads", set.kv_heads}, {"key_dim", set.key_dim}, {"value_dim", set.value_dim}}},
          {"routers", routers},
          {"training", set.training}};
}

RouterSet routerSetFromJson(const nlohmann::json& j, const std::string& origin) {
  const Reader in{origin};
  if (!j.is_object()) in.fail("(top level)", "expected a JSON object (a ROUTER.json from `moewb moqae train`)");
  const auto& format = in.at(j, "format", "format");
  if (format != kFormatName) in.fail("format", fmt::format("expected \"{}\", got {}", kFormatName, format.dump()));
  if (in.integer(j, "version", 1, 1000) != kFormatVersion)
    in.fail("version", fmt::format("this moewb reads version {}", kFormatVersion));
  RouterSet set;
  const auto& configs = in.at(j, "configs", "configs");
  if (!configs.is_array()) in.fail("configs", "expected an array of KV specs such as [\"fp16\", \"int4\"]");
  std::string list;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (!configs[i].is_string()) in.fail(fmt::format("configs[{}]", i), "expected a KV spec string");
    list += (i ? "," : "") + configs[i].get<std::string>();
  }
  try {
    set.configs = parseConfigurations(list, "configs");
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", origin, e.what()));
  }
  set.chunk_tokens = static_cast<int>(in.integer(j, "chunk", 1, 1 << 20));
  set.share = static_cast<int>(in.integer(j, "share", 1, 1 << 16));
  const auto& freeze = in.at(j, "freeze", "freeze");
  if (!freeze.is_boolean()) in.fail("freeze", "expected true or false");
  set.freeze = freeze.get<bool>();
  const auto& model = in.at(j, "model", "model");
  const Reader model_in{origin + ": model"};
  set.layers = static_cast<int>(model_in.integer(model, "layers", 1, 1 << 16));
  set.kv_heads = static_cast<int>(model_in.integer(model, "kv_heads", 1, 1 << 16));
  set.key_dim = static_cast<int>(model_in.integer(model, "key_dim", 1, 1 << 16));
  set.value_dim = static_cast<int>(model_in.integer(model, "value_dim", 1, 1 << 16));
  const auto& routers = in.at(j, "routers", "routers");
  if (!routers.is_array() || static_cast<int>(routers.size()) != set.groups())
    in.fail("routers", fmt::format("expected {} routers ({} layers in groups of {})", set.groups(), set.layers, set.share));
  const int d = set.key_dim, m = set.configCount();
  for (int g = 0; g < set.groups(); ++g) {
    const nlohmann::json& rj = routers[g];
    const std::string key = fmt::format("routers[{}]", g);
    Router r;
    const Reader rin{fmt::format("{}: {}", origin, key)};
    r.layer = static_cast<int>(rin.integer(rj, "layer", 0, 1 << 16));
    if (r.layer != g * set.share) in.fail(key + ".layer", fmt::format("expected {} (group {} of {} layers)", g * set.share, g, set.share));
    r.input_scale = in.number(in.at(rj, "input_scale", key + ".input_scale"), key + ".input_scale");
    if (r.input_scale <= 0) in.fail(key + ".input_scale", "expected a positive number");
    r.w1 = in.matrix(in.at(rj, "w1", key + ".w1"), key + ".w1", d, m);
    r.w2 = in.matrix(in.at(rj, "w2", key + ".w2"), key + ".w2", d, m);
    r.w3 = in.matrix(in.at(rj, "w3", key + ".w3"), key + ".w3", m, m);
    set.routers.push_back(std::move(r));
  }
  if (j.contains("training")) set.training = j["training"];
  return set;
}

RouterSet loadRouterSet(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(fmt::format("{}: cannot open the MoQAE router file", path));
  std::stringstream text;
  text << file.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON ({})", path, e.what()));
  }
  return routerSetFromJson(j, path);
}

void saveRouterSet(const RouterSet& set, const std::string& path) {
  writeFileAtomically(path, routerSetToJson(set).dump(1) + "\n");
}

}  // namespace moewb::methods::moqae

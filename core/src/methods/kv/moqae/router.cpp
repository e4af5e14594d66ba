// SPDX-License-Identifier: MIT
// MoQAE's router: features of a chunk, the 2-layer MLP, its hand-written gradient and the chunk's vote
// (moewb/methods/moqae.h).
#include <fmt/format.h>

#include <cmath>
#include <random>

#include "moewb/error.h"
#include "moewb/methods/moqae.h"

namespace moewb::methods::moqae {

namespace {

double silu(double x) {
  return x / (1.0 + std::exp(-x));
}
// d/dx x·σ(x) = σ(x) (1 + x (1 − σ(x)))
double siluDerivative(double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return s * (1.0 + x * (1.0 - s));
}

}  // namespace

double RouterSet::configBits(int j) const {
  const KvFormat& f = configs.at(static_cast<std::size_t>(j)).format;
  const int64_t n = chunk_tokens;
  const int64_t bits = f.method->storedBits(KvTensor::Keys, n, kv_heads, key_dim, f.settings) +
                       f.method->storedBits(KvTensor::Values, n, kv_heads, value_dim, f.settings);
  return double(bits) / double(n * kv_heads * (key_dim + value_dim));
}

std::vector<Configuration> parseConfigurations(const std::string& list, const std::string& origin) {
  std::vector<Configuration> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) throw Error(fmt::format("{}: empty configuration in '{}' (expected e.g. fp16,int8,int4,int2)", origin, list));
    KvSpec spec = parseKvSpec(item);
    if (spec.format.method->residualTokens(spec.format.settings) > 0)
      throw Error(fmt::format("{}: '{}' keeps a residual window; MoQAE's configurations are whole-chunk formats "
                              "(fp16, int8, int4, int2 with -gGROUP)",
                              origin, item));
    if (spec.text.find(":chunk=") != std::string::npos)
      throw Error(fmt::format("{}: '{}': the chunk length is the router's (--chunk), not a configuration's", origin, item));
    for (const auto& c : out)
      if (c.spec == item) throw Error(fmt::format("{}: configuration '{}' is listed twice", origin, item));
    out.push_back({item, spec.format});
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out.size() < 2) throw Error(fmt::format("{}: '{}' has {} configuration(s); a router chooses among at least 2", origin, list, out.size()));
  return out;
}

RouterSet makeRouterSet(std::vector<Configuration> configs, const engine::ModelConfig& config, int chunk_tokens,
                        int share, bool freeze, uint64_t seed) {
  if (chunk_tokens < 1) throw Error(fmt::format("moqae: --chunk {}: expected at least 1 token", chunk_tokens));
  if (share < 1) throw Error(fmt::format("moqae: --share {}: expected at least 1 layer per group", share));
  RouterSet set;
  set.configs = std::move(configs);
  set.chunk_tokens = chunk_tokens;
  set.share = share;
  set.freeze = freeze;
  set.layers = config.layers;
  const engine::KvShape shape = engine::kvShape(config);
  set.kv_heads = shape.kv_heads;
  set.key_dim = shape.key_dim;
  set.value_dim = shape.value_dim;
  const int d = shape.key_dim, m = set.configCount();
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  auto random = [&](int rows, int cols, double std) {
    Eigen::MatrixXd w(rows, cols);
    for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = std * normal(rng);
    return w;
  };
  for (int g = 0; g < set.groups(); ++g) {
    Router r;
    r.layer = g * share;
    r.w1 = random(d, m, 1.0 / std::sqrt(double(d)));
    r.w2 = random(d, m, 1.0 / std::sqrt(double(d)));
    r.w3 = random(m, m, 1.0 / std::sqrt(double(m)));
    set.routers.push_back(std::move(r));
  }
  return set;
}

Eigen::MatrixXd chunkFeatures(const float* keys, int64_t tokens, int kv_heads, int key_dim, int64_t row_stride,
                              double input_scale) {
  Eigen::MatrixXd c = Eigen::MatrixXd::Zero(tokens, key_dim);
  const double w = 1.0 / (double(kv_heads) * input_scale);
  for (int64_t t = 0; t < tokens; ++t)
    for (int h = 0; h < kv_heads; ++h)
      for (int d = 0; d < key_dim; ++d) c(t, d) += w * keys[t * row_stride + int64_t(h) * key_dim + d];
  return c;
}

RouterPass routerForward(const Router& r, const Eigen::MatrixXd& features) {
  RouterPass p;
  p.features = features;
  p.u = features * r.w1;
  p.v = features * r.w2;
  p.hidden = p.u.cwiseProduct(p.v);
  p.act = p.hidden.unaryExpr([](double x) { return silu(x); });
  Eigen::MatrixXd logits = p.act * r.w3;
  p.probs.resize(logits.rows(), logits.cols());
  for (Eigen::Index t = 0; t < logits.rows(); ++t) {
    const double mx = logits.row(t).maxCoeff();
    Eigen::RowVectorXd e = (logits.row(t).array() - mx).exp();
    p.probs.row(t) = e / e.sum();
  }
  return p;
}

void RouterGradients::setZero(const Router& like) {
  w1 = Eigen::MatrixXd::Zero(like.w1.rows(), like.w1.cols());
  w2 = Eigen::MatrixXd::Zero(like.w2.rows(), like.w2.cols());
  w3 = Eigen::MatrixXd::Zero(like.w3.rows(), like.w3.cols());
}

void routerBackward(const Router& r, const RouterPass& p, const Eigen::MatrixXd& dprobs, RouterGradients& g) {
  // Softmax: dz_i = p_i (dp_i − Σ_k p_k dp_k), row by row.
  const Eigen::VectorXd inner = p.probs.cwiseProduct(dprobs).rowwise().sum();
  const Eigen::MatrixXd dlogits = p.probs.cwiseProduct(dprobs - inner.replicate(1, dprobs.cols()));
  g.w3 += p.act.transpose() * dlogits;
  const Eigen::MatrixXd dact = dlogits * r.w3.transpose();
  const Eigen::MatrixXd dhidden = dact.cwiseProduct(p.hidden.unaryExpr([](double x) { return siluDerivative(x); }));
  g.w1 += p.features.transpose() * dhidden.cwiseProduct(p.v);
  g.w2 += p.features.transpose() * dhidden.cwiseProduct(p.u);
}

int majorityVote(const Eigen::MatrixXd& probs, const std::vector<double>& config_bits) {
  std::vector<int> votes(static_cast<std::size_t>(probs.cols()), 0);
  for (Eigen::Index t = 0; t < probs.rows(); ++t) {
    Eigen::Index best = 0;
    probs.row(t).maxCoeff(&best);
    ++votes[static_cast<std::size_t>(best)];
  }
  int chosen = 0;
  for (int j = 1; j < static_cast<int>(votes.size()); ++j)
    if (votes[j] > votes[chosen] || (votes[j] == votes[chosen] && config_bits[j] > config_bits[chosen])) chosen = j;
  return chosen;
}

}  // namespace moewb::methods::moqae

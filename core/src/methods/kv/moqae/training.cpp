// SPDX-License-Identifier: MIT
// MoQAE's router training on a cost table: the three loss readings, their gradients through the router,
// and AdamW (moewb/methods/moqae_training.h).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "moewb/error.h"
#include "moewb/methods/moqae_training.h"

namespace moewb::methods::moqae {

LossReading parseLossReading(const std::string& name, const std::string& origin) {
  if (name == "text") return LossReading::Text;
  if (name == "printed") return LossReading::Printed;
  if (name == "expected-bits") return LossReading::ExpectedBits;
  throw Error(fmt::format("{}: unknown loss '{}' (expected text, printed or expected-bits)", origin, name));
}

std::string lossReadingName(LossReading reading) {
  switch (reading) {
    case LossReading::Text: return "text";
    case LossReading::Printed: return "printed";
    case LossReading::ExpectedBits: return "expected-bits";
  }
  return "?";
}

namespace {

std::vector<double> configBits(const RouterSet& set) {
  std::vector<double> bits;
  for (int j = 0; j < set.configCount(); ++j) bits.push_back(set.configBits(j));
  return bits;
}

// Δ of the expected-bits reading: the mean delta of the lowest-bit configuration over the table, so that
// the model term is about 1 where the memory term is lowest (floored: a table where nothing costs).
double deltaScale(const RouterSet& set, const CostTable& table) {
  const std::vector<double> bits = configBits(set);
  const int lowest = static_cast<int>(std::min_element(bits.begin(), bits.end()) - bits.begin());
  double sum = 0;
  std::size_t n = 0;
  for (int w = 0; w < table.windows; ++w)
    for (int g = 0; g < table.groups; ++g)
      for (std::size_t c = 0; c < table.routed_chunks.size(); ++c, ++n) sum += table.deltaAt(w, g, c, lowest);
  return std::max(n ? sum / double(n) : 0.0, 1e-6);
}

Eigen::MatrixXd scaledFeatures(const Router& r, const Eigen::MatrixXd& raw) {
  return raw / r.input_scale;
}

}  // namespace

double routerLoss(const RouterSet& set, const CostTable& table, std::span<const int> windows,
                  const TrainingOptions& o, std::vector<RouterGradients>* gradients) {
  const std::vector<double> bits = configBits(set);
  const double scale = o.loss == LossReading::ExpectedBits ? deltaScale(set, table) : 1.0;
  const std::size_t routed = table.routed_chunks.size();
  const double items = double(windows.size()) * table.groups * double(routed);
  if (items == 0) return 0;
  const int m = set.configCount();
  double total = 0;
  for (int w : windows)
    for (int g = 0; g < table.groups; ++g) {
      const Router& router = set.routers[static_cast<std::size_t>(g)];
      for (std::size_t c = 0; c < routed; ++c) {
        const RouterPass pass = routerForward(router, scaledFeatures(router, table.features[table.item(w, g, c)]));
        const Eigen::RowVectorXd chunk_probs = pass.probs.colwise().mean();
        Eigen::RowVectorXd dchunk = Eigen::RowVectorXd::Zero(m);  // dLoss/dp_j of this chunk
        if (o.loss == LossReading::ExpectedBits) {
          for (int j = 0; j < m; ++j)
            dchunk[j] = o.lambda * table.deltaAt(w, g, c, j) / scale + (1 - o.lambda) * bits[j] / 16.0;
        } else {
          const int sel = majorityVote(pass.probs, bits);
          const double nll = table.base_nll[static_cast<std::size_t>(w)] + table.deltaAt(w, g, c, sel);
          const double memory = o.loss == LossReading::Text ? bits[sel] / 16.0 : 16.0 / bits[sel];
          dchunk[sel] = o.lambda * nll / bits[sel] + (1 - o.lambda) * memory;
        }
        total += chunk_probs.dot(dchunk);
        if (gradients) {
          // p_j is the mean over the chunk's tokens: each token's probability gets 1/N of dL/dp_j.
          const Eigen::MatrixXd dprobs = Eigen::VectorXd::Constant(pass.probs.rows(), 1.0 / (double(pass.probs.rows()) * items)) * dchunk;
          routerBackward(router, pass, dprobs, (*gradients)[static_cast<std::size_t>(g)]);
        }
      }
    }
  return total / items;
}

nlohmann::json RoutingEstimate::toJson(const RouterSet& set) const {
  nlohmann::json s = nlohmann::json::object();
  for (int j = 0; j < set.configCount(); ++j) s[set.configs[j].spec] = shares[static_cast<std::size_t>(j)];
  return {{"avg_bits", avg_bits}, {"delta_nll", delta_nll}, {"shares", s}};
}

RoutingEstimate estimateRouting(const RouterSet& set, const CostTable& table, int seq_len) {
  const std::vector<double> bits = configBits(set);
  RoutingEstimate e;
  e.shares.assign(static_cast<std::size_t>(set.configCount()), 0.0);
  const int64_t n = set.chunk_tokens;
  const std::size_t routed = table.routed_chunks.size();
  double bit_sum = 0, delta_sum = 0, chosen = 0;
  for (int w = 0; w < table.windows; ++w) {
    // Tokens that are fp16 whatever the router says: the frozen chunk and the trailing partial chunk.
    bit_sum += 16.0 * double(seq_len - int64_t(routed) * n) * set.layers;
    for (int g = 0; g < table.groups; ++g) {
      const Router& router = set.routers[static_cast<std::size_t>(g)];
      const int layers = std::min(set.share, set.layers - g * set.share);
      for (std::size_t c = 0; c < routed; ++c) {
        const int sel = majorityVote(routerForward(router, scaledFeatures(router, table.features[table.item(w, g, c)])).probs, bits);
        bit_sum += bits[sel] * double(n) * layers;
        delta_sum += table.deltaAt(w, g, c, sel);
        e.shares[static_cast<std::size_t>(sel)] += 1;
        chosen += 1;
      }
    }
  }
  e.avg_bits = bit_sum / (double(seq_len) * set.layers * table.windows);
  e.delta_nll = delta_sum / table.windows;
  for (double& s : e.shares) s /= std::max(chosen, 1.0);
  return e;
}

TrainingResult trainRouters(RouterSet& set, const CostTable& table, const TrainingOptions& o,
                            const ProgressFn& progress) {
  if (!(o.lambda >= 0 && o.lambda <= 1)) throw Error(fmt::format("moqae: --lambda {}: expected a number in 0..1", o.lambda));
  if (o.steps < 0 || o.batch < 1) throw Error("moqae: --steps must be at least 0 and the batch at least 1");
  const auto t0 = std::chrono::steady_clock::now();
  // input_scale: the RMS of the group's features over the table.
  for (int g = 0; g < table.groups; ++g) {
    double sq = 0, count = 0;
    for (int w = 0; w < table.windows; ++w)
      for (std::size_t c = 0; c < table.routed_chunks.size(); ++c) {
        const Eigen::MatrixXd& f = table.features[table.item(w, g, c)];
        sq += f.squaredNorm();
        count += double(f.size());
      }
    set.routers[static_cast<std::size_t>(g)].input_scale = count > 0 && sq > 0 ? std::sqrt(sq / count) : 1.0;
  }
  const int seq_len = static_cast<int>(table.chunks_per_window * set.chunk_tokens);
  TrainingResult result;
  result.before = estimateRouting(set, table, seq_len);

  struct Moments {
    RouterGradients m, v;
  };
  std::vector<Moments> moments(set.routers.size());
  for (std::size_t g = 0; g < set.routers.size(); ++g) {
    moments[g].m.setZero(set.routers[g]);
    moments[g].v.setZero(set.routers[g]);
  }
  std::mt19937_64 rng(o.seed ^ 0x6d6f716165ULL);
  std::vector<int> order(static_cast<std::size_t>(table.windows));
  std::iota(order.begin(), order.end(), 0);
  const int batch = std::min(o.batch, table.windows);
  auto adamw = [&](Eigen::MatrixXd& w, Eigen::MatrixXd& m, Eigen::MatrixXd& v, const Eigen::MatrixXd& g, int t) {
    w *= 1.0 - o.lr * o.weight_decay;  // decoupled weight decay
    m = o.beta1 * m + (1 - o.beta1) * g;
    v = o.beta2 * v + (1 - o.beta2) * g.cwiseAbs2();
    const double c1 = 1 - std::pow(o.beta1, t), c2 = 1 - std::pow(o.beta2, t);
    w.array() -= o.lr * (m.array() / c1) / ((v.array() / c2).sqrt() + o.eps);
  };
  for (int step = 1; step <= o.steps; ++step) {
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<RouterGradients> grads(set.routers.size());
    for (std::size_t g = 0; g < set.routers.size(); ++g) grads[g].setZero(set.routers[g]);
    const double loss = routerLoss(set, table, std::span<const int>(order.data(), std::size_t(batch)), o, &grads);
    for (std::size_t g = 0; g < set.routers.size(); ++g) {
      Router& r = set.routers[g];
      adamw(r.w1, moments[g].m.w1, moments[g].v.w1, grads[g].w1, step);
      adamw(r.w2, moments[g].m.w2, moments[g].v.w2, grads[g].w2, step);
      adamw(r.w3, moments[g].m.w3, moments[g].v.w3, grads[g].w3, step);
    }
    result.loss_curve.push_back(loss);
    if (progress && (step % 25 == 0 || step == o.steps) &&
        !progress(double(step) / o.steps, fmt::format("training step {} of {}, loss {:.5f}", step, o.steps, loss)))
      throw Cancelled{};
  }
  result.after = estimateRouting(set, table, seq_len);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace moewb::methods::moqae

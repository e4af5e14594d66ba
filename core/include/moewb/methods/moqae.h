// SPDX-License-Identifier: MIT
#pragma once
// MoQAE (ACL 2025): a mixed-precision KV cache whose format per (layer, chunk) is chosen by small routers.
//
// Router (one per group of `share` layers; the group's first layer routes, the others reuse its decision):
//   P = softmax( SiLU(C W1 ⊙ C W2) W3 ),  W1, W2 ∈ R^{D×M}, W3 ∈ R^{M×M}
// with D the key head dimension and M the number of configurations. C ∈ R^{N×D} is the chunk's keys after
// RoPE averaged over the KV heads (one row per token) and divided by the router's `input_scale` (the RMS
// of those rows on the calibration text, so the quadratic C W1 ⊙ C W2 starts near unit size whatever the
// model's key scale). The paper leaves C open; keys carry the outlier channels that make a chunk hard to
// quantize, and averaging over heads keeps the router at D inputs as the paper's shapes require.
// Every token votes for its top-1 configuration; the chunk takes the one with most votes (a tie goes to the
// configuration with more stored bits: the safer choice for accuracy).
// Routing freezing: the first chunk of every sequence stays fp16 (attention sinks). The trailing partial
// chunk is fp16 as for every KV format (moewb/engine/kv_cache.h).
//
// The routers and their settings live in a ROUTER.json written by `moewb moqae train` and named by the KV
// spec `moqae:ROUTER.json` (docs/kv-cache.md#moqae).
#include <Eigen/Core>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moewb/engine/kv_cache.h"
#include "moewb/methods/kv_method.h"

namespace moewb::methods::moqae {

// The weights of one router, float64 (they are tiny, and training differentiates them by hand).
struct Router {
  int layer = 0;             // the layer that routes; layers [layer, layer + share) use its decision
  double input_scale = 1.0;  // C = mean-over-heads keys / input_scale
  Eigen::MatrixXd w1, w2;    // D x M
  Eigen::MatrixXd w3;        // M x M
};

// One configuration a router can choose.
struct Configuration {
  std::string spec;  // a KV spec of the registry: "int4", "int4-g32"
  KvFormat format;
};

// Everything a ROUTER.json holds.
struct RouterSet {
  std::vector<Configuration> configs;
  int chunk_tokens = 32;  // N
  int share = 3;          // g: layers per routing group
  bool freeze = true;     // the first chunk of every sequence stays fp16
  int layers = 0;         // decoder layers of the model it was trained for
  int kv_heads = 0, key_dim = 0, value_dim = 0;
  std::vector<Router> routers;  // one per group, routers[i].layer = i * share
  nlohmann::json training = nlohmann::json::object();  // settings, loss curve, calibration estimates

  int groups() const { return layers > 0 ? (layers + share - 1) / share : 0; }
  int configCount() const { return static_cast<int>(configs.size()); }
  // Stored bits per K/V element of configuration j for one complete chunk (codes, scales and zeros).
  double configBits(int j) const;
};

// The configuration set from "fp16,int8,int4,int2" (each a KV spec without ':chunk'); throws moewb::Error
// naming `origin`.
std::vector<Configuration> parseConfigurations(const std::string& list, const std::string& origin);
// Routers with random weights (W ~ N(0, 1/fan_in)), input_scale 1.
RouterSet makeRouterSet(std::vector<Configuration> configs, const engine::ModelConfig& config, int chunk_tokens,
                        int share, bool freeze, uint64_t seed);

// C for one chunk: row t = mean over KV heads of the keys of token t, divided by `input_scale`.
Eigen::MatrixXd chunkFeatures(const float* keys, int64_t tokens, int kv_heads, int key_dim, int64_t row_stride,
                              double input_scale);

// The router's forward pass with what backward needs.
struct RouterPass {
  Eigen::MatrixXd features;  // C, N x D
  Eigen::MatrixXd u, v;      // C W1, C W2
  Eigen::MatrixXd hidden;    // u ⊙ v
  Eigen::MatrixXd act;       // SiLU(hidden)
  Eigen::MatrixXd probs;     // softmax rows of act W3, N x M
};
RouterPass routerForward(const Router& router, const Eigen::MatrixXd& features);

struct RouterGradients {
  Eigen::MatrixXd w1, w2, w3;
  void setZero(const Router& like);
};
// Adds dLoss/dW given dLoss/dprobs (N x M) of a pass.
void routerBackward(const Router& router, const RouterPass& pass, const Eigen::MatrixXd& dprobs,
                    RouterGradients& gradients);

// Top-1 per token, then the most voted configuration; a tie goes to the one with more stored bits.
int majorityVote(const Eigen::MatrixXd& probs, const std::vector<double>& config_bits);

// ROUTER.json: errors name the file and the key ("router.json: routers[0].w1: expected 64 rows ...").
RouterSet loadRouterSet(const std::string& path);
nlohmann::json routerSetToJson(const RouterSet& set);
RouterSet routerSetFromJson(const nlohmann::json& json, const std::string& origin);
void saveRouterSet(const RouterSet& set, const std::string& path);  // atomically (temporary + rename)

// The KV-cache policy of a router set: eval and generate use it like any other (MoeEngine::setKvCachePolicy).
// formatFor is called in (layer, sequence, chunk) order, so a group's first layer decides before the
// layers that reuse the decision; the decisions of the current pass are kept here (guarded by a mutex:
// one policy may serve engines on several threads, but then passes must not interleave on it).
class MoqaePolicy final : public engine::KvCachePolicy {
 public:
  MoqaePolicy(std::shared_ptr<const RouterSet> routers, std::string label);
  int chunkTokens() const override { return routers_->chunk_tokens; }
  const KvFormat& formatFor(const engine::KvChunkContext& chunk) const override;
  std::string label() const override { return label_; }
  const RouterSet& routers() const { return *routers_; }
  // How many complete chunks each layer stored in each configuration since the last reset ([layer][config];
  // the frozen first chunks are counted apart, in frozenChunks(), over all layers).
  std::vector<std::vector<int64_t>> tally() const;
  int64_t frozenChunks() const;
  void resetTally() const;

 private:
  std::shared_ptr<const RouterSet> routers_;
  std::string label_;
  KvFormat fp16_;
  mutable std::mutex mutex_;
  // Decision of group g for (sequence, chunk) in the current pass.
  mutable std::vector<std::vector<std::vector<int>>> decisions_;  // [group][sequence][chunk]
  mutable std::vector<std::vector<int64_t>> tally_;
  mutable int64_t frozen_ = 0;
};

}  // namespace moewb::methods::moqae

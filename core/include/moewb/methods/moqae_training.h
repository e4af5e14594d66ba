// SPDX-License-Identifier: MIT
#pragma once
// Training MoQAE's routers with the LLM frozen (docs/kv-cache.md#moqae).
//
// The NLL estimator. The paper's loss needs "the model's NLL with the KV cache quantized as currently
// routed", which carries no gradient to the router (only p_j does). Running the model under the current
// routing at every step would cost a forward pass per step and still not say which chunk's choice hurt.
// Since the LLM is frozen, what a configuration costs in a chunk does not depend on the router: the cost
// table measures it once, before training. For every calibration window w, routing group g, routed chunk c
// and configuration j it holds
//   delta[w, g, c, j] = mean NLL of window w with chunk c of group g's layers stored as j and every other
//                       chunk fp16, minus the mean NLL with every chunk fp16,
// (all those variants of a window run as one batch of sequences through the engine's KV-cache hook) and
// the router's features C of each chunk from the fp16 pass. Training then needs no forward pass of the
// LLM: the NLL of a routing is estimated additively, base + Σ chunks delta (interactions between chunks
// are ignored; `moewb moqae sweep` measures the true perplexity of the trained routing).
//
// Loss readings (L = λ·L_model + (1−λ)·L_mem, averaged over the routed chunks of the batch; p_j is the
// chunk's mean token probability of configuration j, sel the majority vote, B_j the configuration's stored
// bits per element with scales and zeros, L_nll,j = base NLL of the window + delta of the chunk under j):
//  - text (default): L_model = p_sel·L_nll,sel/B_sel, L_mem = p_sel·B_sel/16 — the paper's Eq. 3-5 with
//    the memory term the way its text describes it (it rewards low bit widths);
//  - printed: L_mem = 16·p_sel/B_sel, as Eq. 5 is printed (it penalises low bit widths like L_model);
//  - expected-bits: the expectation over the router's distribution instead of the selected term,
//    L_model = Σ_j p_j·delta_j/Δ, L_mem = Σ_j p_j·B_j/16, with Δ the mean delta of the lowest-bit
//    configuration over the table (so both terms are about 1 at their worst). Smooth, and minimised by the
//    configuration with the least λ·delta/Δ + (1−λ)·B/16 per chunk: a straight trade of bits for accuracy.
#include <Eigen/Core>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "moewb/engine/engine.h"
#include "moewb/methods/moqae.h"
#include "moewb/progress.h"

namespace moewb::methods::moqae {

enum class LossReading { Text, Printed, ExpectedBits };
// "text", "printed", "expected-bits"; throws moewb::Error naming `origin`.
LossReading parseLossReading(const std::string& name, const std::string& origin);
std::string lossReadingName(LossReading reading);

struct CostTable {
  int windows = 0, groups = 0, configs = 0;
  std::vector<int64_t> routed_chunks;      // chunk indices a router decides (1.. with freezing, else 0..)
  int64_t chunks_per_window = 0;           // complete chunks of a window (routed or frozen)
  std::vector<double> base_nll;            // [w]: mean NLL per scored token, every chunk fp16
  std::vector<double> delta;               // [((w * groups + g) * routed + c) * configs + j]
  std::vector<Eigen::MatrixXd> features;   // [(w * groups + g) * routed + c]: C before input_scale
  double seconds = 0;                      // how long measuring took

  std::size_t item(int w, int g, std::size_t c) const { return (std::size_t(w) * groups + g) * routed_chunks.size() + c; }
  double deltaAt(int w, int g, std::size_t c, int j) const { return delta[item(w, g, c) * configs + j]; }
};

struct CostTableOptions {
  int seq_len = 256;             // tokens per calibration window
  int windows = 12;              // windows spread evenly over the calibration ids
  int64_t batch_tokens = 8192;   // tokens per forward pass
};

// Measures the table for the router set's configurations, chunk length, groups and freezing. Throws
// moewb::Error when the ids hold fewer than one window, Cancelled when progress returns false.
CostTable measureCostTable(const engine::MoeEngine& engine, std::span<const int32_t> ids, const RouterSet& set,
                           const CostTableOptions& options, const ProgressFn& progress = {});

struct TrainingOptions {
  double lambda = 0.5;
  LossReading loss = LossReading::Text;
  int steps = 1500;
  int batch = 8;  // windows per step (all their routed chunks)
  double lr = 3e-4, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;  // AdamW
  uint64_t seed = 0;
};

// What a routing does on the calibration table (additive estimate).
struct RoutingEstimate {
  double avg_bits = 0;         // over the whole cache of a window: frozen and trailing chunks fp16
  double delta_nll = 0;        // estimated increase of the mean NLL, averaged over windows
  std::vector<double> shares;  // fraction of routed chunks per configuration
  nlohmann::json toJson(const RouterSet& set) const;
};
RoutingEstimate estimateRouting(const RouterSet& set, const CostTable& table, int seq_len);

struct TrainingResult {
  std::vector<double> loss_curve;  // mean loss per step
  RoutingEstimate before, after;
  double seconds = 0;
};

// The loss of `windows` of the table under the routers and, when `gradients` is given (one per router),
// its gradient (dL/dW, summed into them).
double routerLoss(const RouterSet& set, const CostTable& table, std::span<const int> windows,
                  const TrainingOptions& options, std::vector<RouterGradients>* gradients);

// Sets every router's input_scale from the table, then trains the routers in place. Cancelled when
// progress returns false.
TrainingResult trainRouters(RouterSet& set, const CostTable& table, const TrainingOptions& options,
                            const ProgressFn& progress = {});

}  // namespace moewb::methods::moqae

// SPDX-License-Identifier: MIT
// The KV-cache policy of a trained router set, and `moqae` in the method registry (spec `moqae:ROUTER.json`).
#include <fmt/format.h>

#include "moewb/error.h"
#include "moewb/methods/moqae.h"
#include "moewb/methods/registry.h"

namespace moewb::methods::moqae {

MoqaePolicy::MoqaePolicy(std::shared_ptr<const RouterSet> routers, std::string label)
    : routers_(std::move(routers)), label_(std::move(label)) {
  if (!routers_ || routers_->routers.empty()) throw Error(fmt::format("{}: no routers", label_));
  const KvMethod& half = MethodRegistry::instance().getKv("fp16", label_);
  fp16_ = {&half, half.defaults()};
  decisions_.resize(routers_->routers.size());
  resetTally();
}

const KvFormat& MoqaePolicy::formatFor(const engine::KvChunkContext& c) const {
  const RouterSet& set = *routers_;
  if (c.layer >= set.layers || c.key_dim != set.key_dim || c.kv_heads != set.kv_heads)
    throw Error(fmt::format("{}: trained for {} layers of {} KV heads x {} key channels, used on layer {} with {} x {}",
                            label_, set.layers, set.kv_heads, set.key_dim, c.layer, c.kv_heads, c.key_dim));
  if (c.tokens != set.chunk_tokens)
    throw Error(fmt::format("{}: chunks of {} tokens, the router was trained on {}", label_, c.tokens, set.chunk_tokens));
  std::lock_guard lock(mutex_);
  if (set.freeze && c.chunk == 0) {
    ++frozen_;
    return fp16_;
  }
  const int group = c.layer / set.share;
  auto& seqs = decisions_[static_cast<std::size_t>(group)];
  if (seqs.size() <= static_cast<std::size_t>(c.sequence)) seqs.resize(static_cast<std::size_t>(c.sequence) + 1);
  auto& chunks = seqs[static_cast<std::size_t>(c.sequence)];
  if (chunks.size() <= static_cast<std::size_t>(c.chunk)) chunks.resize(static_cast<std::size_t>(c.chunk) + 1, -1);
  int& decision = chunks[static_cast<std::size_t>(c.chunk)];
  if (c.layer % set.share == 0) {
    // The group's routing layer: a fresh decision for this pass (later layers of the group reuse it).
    const Router& router = set.routers[static_cast<std::size_t>(group)];
    std::vector<double> bits;
    for (int j = 0; j < set.configCount(); ++j) bits.push_back(set.configBits(j));
    const Eigen::MatrixXd features =
        chunkFeatures(c.keys, c.tokens, c.kv_heads, c.key_dim, c.key_row_stride, router.input_scale);
    decision = majorityVote(routerForward(router, features).probs, bits);
  } else if (decision < 0) {
    throw Error(fmt::format("{}: layer {} reuses the decision of layer {} for chunk {}, which was not routed",
                            label_, c.layer, group * set.share, c.chunk));
  }
  ++tally_[static_cast<std::size_t>(c.layer)][static_cast<std::size_t>(decision)];
  return set.configs[static_cast<std::size_t>(decision)].format;
}

std::vector<std::vector<int64_t>> MoqaePolicy::tally() const {
  std::lock_guard lock(mutex_);
  return tally_;
}

int64_t MoqaePolicy::frozenChunks() const {
  std::lock_guard lock(mutex_);
  return frozen_;
}

void MoqaePolicy::resetTally() const {
  std::lock_guard lock(mutex_);
  tally_.assign(static_cast<std::size_t>(routers_->layers),
                std::vector<int64_t>(static_cast<std::size_t>(routers_->configCount()), 0));
  frozen_ = 0;
}

namespace {

class MoqaeKvMethod final : public KvMethod {
 public:
  std::string_view name() const override { return "moqae"; }
  std::string_view title() const override { return "MoQAE (a trained router chooses the format per chunk)"; }
  std::string_view summary() const override {
    return "moqae:ROUTER.json: per (layer group, chunk) one of the router's configurations, chosen from the "
           "chunk's keys (`moewb moqae train`)";
  }
  const std::vector<OptionSpec>& options() const override {
    static const std::vector<OptionSpec> none;
    return none;
  }
  bool choosesPerChunk() const override { return true; }
  std::shared_ptr<const engine::KvCachePolicy> makePolicy(std::string_view spec,
                                                          std::string_view argument) const override {
    if (argument.empty())
      throw Error(fmt::format("KV spec '{}': expected moqae:ROUTER.json (a file from `moewb moqae train`)", spec));
    auto set = std::make_shared<const RouterSet>(loadRouterSet(std::string(argument)));
    return std::make_shared<MoqaePolicy>(std::move(set), std::string(spec));
  }
  void quantizeChunk(const KvChunk&, const KvSettings&) const override {
    throw Error("moqae: a chunk is stored in the format its router chose, never in `moqae` itself");
  }
  int64_t storedBits(KvTensor, int64_t, int, int, const KvSettings&) const override {
    throw Error("moqae: a chunk's size is its chosen format's");
  }
};

}  // namespace

}  // namespace moewb::methods::moqae

namespace moewb::methods {
std::unique_ptr<KvMethod> makeMoqaeKvMethod() {
  return std::make_unique<moqae::MoqaeKvMethod>();
}
}  // namespace moewb::methods

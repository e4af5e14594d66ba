// SPDX-License-Identifier: MIT
// Routers of the supported families, from router logits to the chosen experts and their weights.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "moe_layer.h"
#include "moewb/parallel.h"

namespace moewb::engine {
namespace {

// Indices of the k largest values, best first; ties go to the lower index (torch.topk on CPU usually
// agrees, but ties are the one place where routing may legitimately differ from HF).
void topK(const float* v, int n, int k, int32_t* out) {
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  std::copy(idx.begin(), idx.begin() + k, out);
}

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

// Scores over all experts first (softmax, or DeepSeek-V3's sigmoid with the correction bias for the
// choice), optionally limited to the best groups, then top-k of the scores.
void scoresThenTopK(const ModelConfig& c, const float* l, const float* score_bias, std::vector<float>& scores,
                    std::vector<float>& choice, std::vector<float>& group_score, std::vector<int32_t>& groups,
                    int32_t* idx, float* w) {
  const int E = c.num_experts, k = c.top_k;
  const int group_size = c.n_group > 0 ? E / c.n_group : E;
  if (c.scoring == RouterScoring::SoftmaxTopK) {
    const float mx = *std::max_element(l, l + E);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += scores[e] = std::exp(l[e] - mx);
    for (int e = 0; e < E; ++e) scores[e] = static_cast<float>(scores[e] / sum);
    choice = scores;
  } else {
    for (int e = 0; e < E; ++e) {
      scores[e] = sigmoid(l[e]);
      choice[e] = scores[e] + score_bias[e];
    }
  }
  if (c.n_group > 1 && c.topk_group < c.n_group) {
    // Grouped top-k: keep the best topk_group groups (V2: group max; V3: sum of the group's top two).
    for (int gi = 0; gi < c.n_group; ++gi) {
      const float* gs = choice.data() + gi * group_size;
      if (c.scoring == RouterScoring::SoftmaxTopK) {
        group_score[gi] = *std::max_element(gs, gs + group_size);
      } else {
        int32_t best2[2];
        topK(gs, group_size, std::min(2, group_size), best2);
        group_score[gi] = gs[best2[0]] + (group_size > 1 ? gs[best2[1]] : 0.0f);
      }
    }
    topK(group_score.data(), c.n_group, c.topk_group, groups.data());
    for (int gi = 0; gi < c.n_group; ++gi)
      if (std::find(groups.begin(), groups.end(), gi) == groups.end())
        std::fill(choice.begin() + gi * group_size, choice.begin() + (gi + 1) * group_size, 0.0f);
  }
  topK(choice.data(), E, k, idx);
  float wsum = 0;
  for (int j = 0; j < k; ++j) wsum += w[j] = scores[idx[j]];
  const bool deepseek = c.mla;
  if (c.norm_topk_prob && (!deepseek || k > 1)) {
    const float denom = deepseek ? wsum + 1e-20f : wsum;
    for (int j = 0; j < k; ++j) w[j] /= denom;
    if (c.scoring == RouterScoring::SigmoidBiasedTopK)
      for (int j = 0; j < k; ++j) w[j] *= static_cast<float>(c.routed_scaling);
  } else if (deepseek) {
    for (int j = 0; j < k; ++j) w[j] *= static_cast<float>(c.routed_scaling);
  }
}

// Top-k of the raw logits first, then a function of the chosen logits only: a softmax over them (gpt-oss,
// GraniteMoE) or a sigmoid of each (Llama 4).
void topKThenScores(const ModelConfig& c, const float* l, int32_t* idx, float* w) {
  const int k = c.top_k;
  topK(l, c.num_experts, k, idx);
  if (c.scoring == RouterScoring::TopKSigmoid) {
    for (int j = 0; j < k; ++j) w[j] = sigmoid(l[idx[j]]);
    return;
  }
  const float mx = l[idx[0]];
  double sum = 0;
  for (int j = 0; j < k; ++j) sum += w[j] = std::exp(l[idx[j]] - mx);
  for (int j = 0; j < k; ++j) w[j] = static_cast<float>(w[j] / sum);
}

}  // namespace

void routeTokens(const ModelConfig& c, const float* logits, int64_t n, const float* score_bias,
                 int32_t* chosen, float* weights) {
  const int E = c.num_experts, k = c.top_k;
  constexpr int64_t kBlock = 256;
  parallelFor(static_cast<std::size_t>((n + kBlock - 1) / kBlock), [&](std::size_t block) {
    std::vector<float> scores(E), choice(E), group_score(std::max(c.n_group, 1));
    std::vector<int32_t> groups(std::max(c.topk_group, 1));
    const int64_t end = std::min<int64_t>(n, static_cast<int64_t>(block + 1) * kBlock);
    for (int64_t t = static_cast<int64_t>(block) * kBlock; t < end; ++t) {
      const float* l = logits + t * E;
      if (c.scoring == RouterScoring::TopKSoftmax || c.scoring == RouterScoring::TopKSigmoid)
        topKThenScores(c, l, chosen + t * k, weights + t * k);
      else
        scoresThenTopK(c, l, score_bias, scores, choice, group_score, groups, chosen + t * k,
                       weights + t * k);
    }
  });
}

}  // namespace moewb::engine

// SPDX-License-Identifier: MIT
#pragma once
#include <Eigen/Core>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "moewb/checkpoint.h"

namespace moewb {

// What part of the network a tensor belongs to.
enum class Block : uint8_t { Attention, MlpDense, Expert, SharedExpert, Router, Embedding, LmHead, Norm, Other };
// Which projection inside its block.
enum class Proj : uint8_t {
  None, Q, K, V, O, QKV, QA, QB, KVA, KVB,  // attention (QA/QB/KVA/KVB: DeepSeek MLA low-rank projections)
  Gate, Up, Down, GateUp,                   // MLP / expert (GateUp: gate and up fused in one tensor)
  RouterWeight, SharedGate, Bias, Norm, Other
};
enum class MlpKind : uint8_t { None, Dense, Moe };

std::string_view blockName(Block b);
std::string_view projName(Proj p);
std::string_view mlpKindName(MlpKind k);
std::optional<Block> parseBlock(std::string_view s);

struct TensorClass {
  int layer = -1;           // global layer index (encoder blocks first, then decoder blocks), -1 if none
  Block block = Block::Other;
  Proj proj = Proj::None;
  int expert = -1;          // routed expert index for per-expert tensors; -1 otherwise
  int experts_in_tensor = 0;  // >0 for fused 3-D expert tensors [E, a, b]
  bool input_major = false;   // stored as [in, out] (x @ W, gpt_oss / llama4) rather than [out, in]
  bool is_bias = false;
  bool is_scale = false;      // quantization scales of another tensor (FP8 `weight_scale_inv`), not a weight
};

struct LayerInfo {
  int index = 0;
  std::string stack;  // "" for decoder-only models, "encoder"/"decoder" for encoder-decoder ones
  MlpKind mlp = MlpKind::None;
  int num_experts = 0;
  int num_shared_experts = 0;
  int top_k = 0;
};

// A 2-D weight matrix as the quantizers see it: [rows = out features, cols = in features], possibly a
// zero-copy slice of a fused 3-D expert tensor.
struct WeightMatrix {
  std::size_t tensor = 0;  // index into Checkpoint::tensors() / ModelCatalog::classes()
  int slice = -1;          // expert slice of a fused 3-D tensor, -1 for a plain 2-D tensor
  int64_t rows = 0, cols = 0;
  std::string name;  // tensor name, with "[e]" appended for slices
};

using MatrixRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Knows what every tensor of a checkpoint is. Classifies by structure (names of modules and shapes, the
// config's expert counts), not by a list of model types, so families beyond the known ones work too.
class ModelCatalog {
 public:
  // Classifying takes a while for the largest checkpoints (~100k tensors): `progress` hears about it and
  // returning false stops it (moewb::Cancelled).
  explicit ModelCatalog(std::shared_ptr<const Checkpoint> ckpt, const ProgressFn& progress = {});

  const Checkpoint& checkpoint() const { return *ckpt_; }
  std::shared_ptr<const Checkpoint> checkpointPtr() const { return ckpt_; }
  const std::string& modelType() const { return model_type_; }  // config.json model_type ("" if none)
  const std::string& family() const { return family_; }         // human-readable family
  const std::vector<LayerInfo>& layers() const { return layers_; }
  const std::vector<TensorClass>& classes() const { return classes_; }  // parallel to checkpoint().tensors()
  const TensorClass& classOf(std::size_t tensor) const { return classes_.at(tensor); }
  // Every 2-D weight (per-expert slices of fused tensors), excluding norms, biases and 1-D tensors.
  const std::vector<WeightMatrix>& matrices() const { return matrices_; }
  // Tensors whose block stayed Other (so the user can see what the heuristics did not recognise).
  std::vector<std::string> unclassified() const;
  int64_t paramsTotal() const;
  std::map<std::string, int64_t> paramsByBlock() const;
  std::map<std::string, uint64_t> bytesByDtype() const;

  // Reads a weight matrix as float [out, in] (transposing input-major layouts).
  MatrixRM readMatrix(const WeightMatrix& m) const;
  // Raw view of a matrix's stored elements: pointer to the first element, dtype and strides (elements)
  // such that element (r, c) of the [out, in] matrix is at data + (r*row_stride + c*col_stride)*size.
  struct RawView {
    const std::byte* data;
    DType dtype;
    int64_t rows, cols, row_stride, col_stride;
  };
  RawView rawView(const WeightMatrix& m) const;

 private:
  void classifyAll(const std::function<void(double)>& check);
  void buildLayers();
  void buildMatrices();
  std::shared_ptr<const Checkpoint> ckpt_;
  std::string model_type_, family_;
  std::vector<TensorClass> classes_;
  std::vector<LayerInfo> layers_;
  std::vector<WeightMatrix> matrices_;
  std::vector<std::pair<std::string, int>> stack_names_;  // layer stacks in global order, with layer counts
};

}  // namespace moewb

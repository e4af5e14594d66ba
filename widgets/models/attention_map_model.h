// SPDX-License-Identifier: MIT
#pragma once
#include <QString>
#include <cstdint>
#include <memory>
#include <optional>

#include "heatmap/heatmap_data.h"
#include "moewb/engine/kv_capture.h"

namespace moewb::gui {

// The attention probabilities of a KV capture (`moewb kv --out FILE` or a capture run in the GUI) as
// heatmaps: one head as query × key, or every head of a layer side by side. Holds the capture shared and
// read-only, so the maps it hands out stay valid while another capture replaces it.
class AttentionMapModel {
 public:
  static constexpr int kAllHeads = -1;

  void setCapture(std::shared_ptr<const engine::KvCapture> capture);
  const engine::KvCapture* capture() const { return capture_.get(); }
  std::shared_ptr<const engine::KvCapture> sharedCapture() const { return capture_; }
  bool empty() const { return !capture_ || capture_->length == 0; }
  int layers() const { return capture_ ? capture_->layers : 0; }
  int heads() const { return capture_ ? capture_->heads : 0; }
  int64_t length() const { return capture_ ? capture_->length : 0; }
  float probability(int layer, int head, int64_t query, int64_t key) const;
  // Decoded token at a position ("#12" when the capture has no pieces), for labels and tooltips.
  QString token(int64_t position) const;

  // Query rows × key columns; keys after the query (causal mask) have no value. With kAllHeads the
  // heads are laid out in a grid of ceil(sqrt(heads)) blocks per row, one empty row/column between
  // blocks. The tooltip names head, query and key tokens and the probability.
  HeatmapData heatmap(int layer, int head, bool logColour = false) const;
  struct Cell {
    int head = 0;
    int64_t query = 0, key = 0;
  };
  // Which head, query and key a cell of heatmap(layer, head) shows; nullopt for separators.
  std::optional<Cell> cellAt(int head, int row, int column) const;
  int gridColumns() const;  // blocks per row of the all-heads grid

  // Attention mass on the first `first_tokens` keys, mean over queries (from first_token_mass).
  double firstTokenMass(int layer, int head) const;
  // The same mass if every query spread its attention evenly over the keys it sees: the baseline
  // that makes attention sinks stand out.
  double uniformFirstTokenMass() const;

 private:
  std::shared_ptr<const engine::KvCapture> capture_;
};

}  // namespace moewb::gui

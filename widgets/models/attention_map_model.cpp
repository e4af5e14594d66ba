// SPDX-License-Identifier: MIT
#include "models/attention_map_model.h"

#include <QObject>
#include <algorithm>
#include <cmath>

namespace moewb::gui {

void AttentionMapModel::setCapture(std::shared_ptr<const engine::KvCapture> capture) {
  capture_ = std::move(capture);
}

float AttentionMapModel::probability(int layer, int head, int64_t query, int64_t key) const {
  if (!capture_ || layer < 0 || layer >= layers() || head < 0 || head >= heads() || query < 0 ||
      query >= length() || key < 0 || key >= length())
    return std::nanf("");
  return capture_->attentionProb(layer, head, query, key);
}

QString AttentionMapModel::token(int64_t position) const {
  if (capture_ && position >= 0 && std::size_t(position) < capture_->pieces.size())
    return QString::fromStdString(capture_->pieces[std::size_t(position)]);
  return QStringLiteral("#%1").arg(position);
}

int AttentionMapModel::gridColumns() const {
  return std::max(1, int(std::ceil(std::sqrt(double(std::max(1, heads()))))));
}

std::optional<AttentionMapModel::Cell> AttentionMapModel::cellAt(int head, int row, int column) const {
  const int64_t t = length();
  if (t == 0 || row < 0 || column < 0) return std::nullopt;
  if (head != kAllHeads) {
    if (row >= t || column >= t || head < 0 || head >= heads()) return std::nullopt;
    return Cell{head, row, column};
  }
  const int64_t block = t + 1;  // a block and its separator
  const int64_t blockRow = row / block, blockColumn = column / block;
  const int64_t q = row % block, k = column % block;
  const int64_t h = blockRow * gridColumns() + blockColumn;
  if (q == t || k == t || blockColumn >= gridColumns() || h >= heads()) return std::nullopt;
  return Cell{int(h), q, k};
}

namespace {
// A short label: the token with line breaks made visible, cut to fit the heatmap's margin.
QString shortToken(const QString& piece) {
  QString s = piece;
  s.replace(QLatin1Char('\n'), QStringLiteral("⏎"));
  return s.size() > 8 ? s.left(7) + QStringLiteral("…") : s;
}
}  // namespace

HeatmapData AttentionMapModel::heatmap(int layer, int head, bool logColour) const {
  HeatmapData d;
  if (empty() || layer < 0 || layer >= layers()) return d;
  const int64_t t = length();
  const bool grid = head == kAllHeads;
  const int blockColumns = grid ? gridColumns() : 1;
  const int blockRows = grid ? (heads() + blockColumns - 1) / blockColumns : 1;
  const int64_t rows = grid ? blockRows * (t + 1) - 1 : t;
  const int64_t columns = grid ? blockColumns * (t + 1) - 1 : t;
  d.metric = QObject::tr("attention probability");
  d.logColour = logColour;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t q = grid ? r % (t + 1) : r;
    d.rowLabels << (q == t ? QString() : QStringLiteral("%1 %2").arg(q).arg(shortToken(token(q))));
  }
  for (int64_t c = 0; c < columns; ++c) {
    const int64_t k = grid ? c % (t + 1) : c;
    d.columnLabels << (k == t ? QString() : QString::number(k));
  }
  d.values.assign(std::size_t(rows * columns), std::nanf(""));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < columns; ++c) {
      const auto cell = cellAt(grid ? kAllHeads : head, int(r), int(c));
      // Keys after the query are masked, not "probability 0": they stay empty cells.
      if (cell && cell->key <= cell->query)
        d.values[std::size_t(r * columns + c)] = probability(layer, cell->head, cell->query, cell->key);
    }
  if (grid)
    for (int h = 0; h < heads(); ++h)
      d.annotations.push_back({int((h / blockColumns) * (t + 1)), int((h % blockColumns) * (t + 1) + t - 1),
                               QObject::tr("head %1").arg(h), true});
  // The tooltip holds the capture, so it stays right even after the view switched captures.
  d.tooltip = [self = *this, layer, head](int row, int column) {
    const auto cell = self.cellAt(head, row, column);
    if (!cell) return QString();
    const QString where = QObject::tr("layer %1, head %2\nquery %3 “%4” → key %5 “%6”")
                              .arg(layer)
                              .arg(cell->head)
                              .arg(cell->query)
                              .arg(self.token(cell->query))
                              .arg(cell->key)
                              .arg(self.token(cell->key));
    if (cell->key > cell->query) return where + QObject::tr("\nmasked (key after the query)");
    return where + QObject::tr("\np = %1")
                       .arg(formatValue(self.probability(layer, cell->head, cell->query, cell->key)));
  };
  return d;
}

double AttentionMapModel::firstTokenMass(int layer, int head) const {
  if (empty() || layer < 0 || layer >= layers() || head < 0 || head >= heads()) return std::nan("");
  const engine::KvCapture& c = *capture_;
  double sum = 0;
  for (int j = 0; j < c.first_tokens; ++j)
    sum += c.first_token_mass[(std::size_t(layer) * std::size_t(c.heads) + std::size_t(head)) *
                                  std::size_t(c.first_tokens) +
                              std::size_t(j)];
  return sum;
}

double AttentionMapModel::uniformFirstTokenMass() const {
  if (empty()) return std::nan("");
  const int64_t first = capture_->first_tokens;
  double sum = 0;
  for (int64_t q = 0; q < length(); ++q) sum += double(std::min(first, q + 1)) / double(q + 1);
  return sum / double(length());
}

}  // namespace moewb::gui

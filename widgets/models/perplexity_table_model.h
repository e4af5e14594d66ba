// SPDX-License-Identifier: MIT
#pragma once
#include <QAbstractTableModel>
#include <QString>
#include <cstdint>
#include <vector>

namespace moewb::gui {

// One evaluated weight variant (original, a quantization run, an export folder, a quick spec): the
// numbers `moewb eval` prints for it.
struct PerplexityRow {
  QString variant;        // "original", "hqq:3", a folder name, "last run (MILO 3-bit)"
  bool original = false;  // the reference row of the Δ column
  double perplexity = 0, meanNll = 0;
  int64_t tokensScored = 0;
  int windows = 0;
  uint64_t weightBytes = 0;       // the model's weights as stored with this variant's matrices
  uint64_t replacedMatrices = 0;  // matrices the variant replaced (0 for the original)
  double tokensPerSecond = 0;
  // Uncertainty over windows (engine::PerplexityResult::ppl_stderr) and, for rows after the original, the
  // paired difference of mean NLL against it on the same windows (engine::pairedNllDifference).
  double perplexityStderr = 0;
  bool hasPaired = false;
  double deltaNll = 0, deltaNllStderr = 0;
  bool deltaSignificant = false;
};

// The perplexity comparison table: variant, perplexity, tokens scored, memory, Δ vs the original.
// Copied or exported as CSV or Markdown with the same columns.
class PerplexityTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Variant, Perplexity, Delta, TokensScored, Memory, Replaced, Speed, ColumnCount };
  enum Role { SortRole = Qt::UserRole + 1 };
  explicit PerplexityTableModel(QObject* parent = nullptr);

  void setRows(std::vector<PerplexityRow> rows);
  const std::vector<PerplexityRow>& rows() const { return rows_; }
  // Relative change of perplexity against the original row (NaN without one).
  double deltaVsOriginal(const PerplexityRow& row) const;
  QString toCsv() const;
  QString toMarkdown() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  QString text(const PerplexityRow& row, int column) const;
  std::vector<PerplexityRow> rows_;
};

}  // namespace moewb::gui

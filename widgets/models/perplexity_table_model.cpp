// SPDX-License-Identifier: MIT
#include "models/perplexity_table_model.h"

#include <QFont>
#include <cmath>

namespace moewb::gui {

PerplexityTableModel::PerplexityTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void PerplexityTableModel::setRows(std::vector<PerplexityRow> rows) {
  beginResetModel();
  rows_ = std::move(rows);
  endResetModel();
}

double PerplexityTableModel::deltaVsOriginal(const PerplexityRow& row) const {
  for (const PerplexityRow& r : rows_)
    if (r.original && r.perplexity > 0) return row.perplexity / r.perplexity - 1.0;
  return std::nan("");
}

int PerplexityTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(rows_.size());
}
int PerplexityTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant PerplexityTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Variant:
      return tr("variant");
    case Perplexity:
      return tr("perplexity");
    case Delta:
      return tr("Δ vs original");
    case TokensScored:
      return tr("tokens scored");
    case Memory:
      return tr("weights as stored (MB)");
    case Replaced:
      return tr("replaced matrices");
    case Speed:
      return tr("tokens/s");
  }
  return {};
}

QString PerplexityTableModel::text(const PerplexityRow& row, int column) const {
  switch (column) {
    case Variant:
      return row.variant;
    case Perplexity:
      if (row.perplexityStderr > 0)
        return QStringLiteral("%1 ± %2").arg(row.perplexity, 0, 'f', 4).arg(row.perplexityStderr, 0, 'f', 4);
      return QString::number(row.perplexity, 'f', 4);
    case Delta: {
      if (row.original) return QStringLiteral("—");
      const double d = deltaVsOriginal(row);
      if (!std::isfinite(d)) return QString();
      QString t = QStringLiteral("%1%2%").arg(d >= 0 ? "+" : "").arg(100.0 * d, 0, 'f', 2);
      // Within two standard errors of the paired difference the sign of Δ means nothing.
      if (row.hasPaired && !row.deltaSignificant) t += tr(" (within noise)");
      return t;
    }
    case TokensScored:
      return QString::number(row.tokensScored);
    case Memory:
      return QString::number(double(row.weightBytes) / 1e6, 'f', 2);
    case Replaced:
      return QString::number(row.replacedMatrices);
    case Speed:
      return QString::number(row.tokensPerSecond, 'f', 0);
  }
  return {};
}

QVariant PerplexityTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(rows_.size())) return {};
  const PerplexityRow& row = rows_[std::size_t(index.row())];
  if (role == Qt::DisplayRole) return text(row, index.column());
  if (role == Qt::TextAlignmentRole && index.column() != Variant)
    return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
  if (role == Qt::ToolTipRole && (index.column() == Delta || index.column() == Perplexity) && row.hasPaired)
    return tr("Paired with the original on the same %1 windows: ΔNLL %2 ± %3 nats per token (%4)")
        .arg(row.windows)
        .arg(row.deltaNll, 0, 'f', 4)
        .arg(row.deltaNllStderr, 0, 'f', 4)
        .arg(row.deltaSignificant ? tr("more than 2 standard errors from 0")
                                  : tr("within 2 standard errors: not distinguishable on this many windows"));
  if (role == Qt::ToolTipRole && index.column() == Memory)
    return tr("%1 bytes: the checkpoint with this variant's matrices at their stored size")
        .arg(row.weightBytes);
  if (role == Qt::FontRole && row.original) {
    QFont f;
    f.setBold(true);
    return f;
  }
  if (role == SortRole) {
    switch (index.column()) {
      case Variant:
        return row.variant;
      case Perplexity:
        return row.perplexity;
      case Delta:
        return row.original ? 0.0 : deltaVsOriginal(row);
      case TokensScored:
        return qlonglong(row.tokensScored);
      case Memory:
        return qulonglong(row.weightBytes);
      case Replaced:
        return qulonglong(row.replacedMatrices);
      case Speed:
        return row.tokensPerSecond;
    }
  }
  return {};
}

QString PerplexityTableModel::toCsv() const {
  // Machine-readable: full precision and bytes, not the rounded display text.
  QString out = QStringLiteral(
      "variant,perplexity,delta_vs_original,tokens_scored,weight_bytes,"
      "replaced_matrices,mean_nll,windows,tokens_per_second,perplexity_stderr,delta_nll,delta_nll_stderr,"
      "delta_significant\n");
  for (const PerplexityRow& r : rows_) {
    QString name = r.variant;
    if (name.contains(QLatin1Char(',')) || name.contains(QLatin1Char('"')))
      name = QLatin1Char('"') + name.replace(QLatin1String("\""), QLatin1String("\"\"")) + QLatin1Char('"');
    const double d = r.original ? 0.0 : deltaVsOriginal(r);
    out += QStringList{name,
                       QString::number(r.perplexity, 'g', 10),
                       std::isfinite(d) ? QString::number(d, 'g', 6) : QString(),
                       QString::number(r.tokensScored),
                       QString::number(r.weightBytes),
                       QString::number(r.replacedMatrices),
                       QString::number(r.meanNll, 'g', 10),
                       QString::number(r.windows),
                       QString::number(r.tokensPerSecond, 'f', 1),
                       QString::number(r.perplexityStderr, 'g', 6),
                       r.hasPaired ? QString::number(r.deltaNll, 'g', 6) : QString(),
                       r.hasPaired ? QString::number(r.deltaNllStderr, 'g', 6) : QString(),
                       r.hasPaired ? QString(r.deltaSignificant ? "true" : "false") : QString()}
               .join(QLatin1Char(','));
    out += QLatin1Char('\n');
  }
  return out;
}

QString PerplexityTableModel::toMarkdown() const {
  QString out = QStringLiteral("|");
  for (int c = 0; c < ColumnCount; ++c)
    out += QLatin1Char(' ') + headerData(c, Qt::Horizontal).toString() + QStringLiteral(" |");
  out += QStringLiteral("\n|");
  for (int c = 0; c < ColumnCount; ++c)
    out += c == Variant ? QStringLiteral("---|") : QStringLiteral("---:|");
  out += QLatin1Char('\n');
  for (const PerplexityRow& r : rows_) {
    out += QLatin1Char('|');
    for (int c = 0; c < ColumnCount; ++c) {
      QString cell = text(r, c);
      cell.replace(QLatin1Char('|'), QStringLiteral("\\|"));
      out += QLatin1Char(' ') + cell + QStringLiteral(" |");
    }
    out += QLatin1Char('\n');
  }
  return out;
}

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#include "summary_panel.h"

#include <QLocale>
#include <algorithm>

#include "moewb/checkpoint.h"
#include "workbench_session.h"

namespace moewb::gui {

SummaryPanel::SummaryPanel(WorkbenchSession* session, QWidget* parent)
    : QTextBrowser(parent), session_(session) {
  setOpenLinks(false);
  connect(session_, &WorkbenchSession::modelOpened, this, &SummaryPanel::refresh);
  connect(session_, &WorkbenchSession::statsFinished, this, &SummaryPanel::refresh);
  connect(session_, &WorkbenchSession::resultsChanged, this, &SummaryPanel::refresh);
  refresh();
}

void SummaryPanel::refresh() {
  setHtml(buildHtml(*session_));
}

namespace {
QString mb(double bytes) {
  return QStringLiteral("%1 MB").arg(bytes / 1e6, 0, 'f', 1);
}
QString esc(const std::string& s) {
  return QString::fromStdString(s).toHtmlEscaped();
}
}  // namespace

QString SummaryPanel::buildHtml(const WorkbenchSession& session) {
  const auto catalog = session.catalog();
  if (!catalog)
    return tr(
        "<h2>No model open</h2><p>Use File → Open, drop a checkpoint here, or start with the demo "
        "model.</p>");
  const Checkpoint& ckpt = catalog->checkpoint();
  const QLocale locale;
  QString h;
  h += QStringLiteral("<h2>%1</h2>").arg(QString::fromStdString(ckpt.root()).toHtmlEscaped());
  h += QStringLiteral("<table cellspacing=4>");
  auto row = [&](const QString& k, const QString& v) {
    h += QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>").arg(k, v);
  };
  // Without config.json the family, top-k and layer kinds are guesses from tensor names: say so rather than
  // show them as facts.
  const bool has_config = ckpt.config().is_object() && ckpt.config().contains("model_type");
  row(tr("Family"),
      has_config ? QStringLiteral("%1 (<code>%2</code>)").arg(esc(catalog->family()), esc(catalog->modelType()))
                 : tr("unknown: the folder has no config.json (model_type); the figures below that need it "
                      "are marked as guesses from tensor names"));
  row(tr("Parameters"), locale.toString(qlonglong(catalog->paramsTotal())));
  row(tr("Files"),
      QStringLiteral("%1 shard(s), %2").arg(ckpt.files().size()).arg(mb(double(ckpt.totalBytes()))));
  row(tr("Tensors"),
      QStringLiteral("%1 (%2 weight matrices)").arg(ckpt.tensors().size()).arg(catalog->matrices().size()));
  int moe = 0, dense = 0, experts = 0, topk = 0, shared = 0;
  for (const LayerInfo& l : catalog->layers()) {
    if (l.mlp == MlpKind::Moe) ++moe;
    if (l.mlp == MlpKind::Dense) ++dense;
    experts = std::max(experts, l.num_experts);
    topk = std::max(topk, l.top_k);
    shared = std::max(shared, l.num_shared_experts);
  }
  row(tr("Layers"), tr("%1 (%2 MoE, %3 dense MLP)").arg(catalog->layers().size()).arg(moe).arg(dense));
  row(tr("Experts"), has_config ? tr("%1 routed per MoE layer, top-%2, %3 shared").arg(experts).arg(topk).arg(shared)
                                 : tr("%1 routed per MoE layer (from the tensors), top-k unknown without "
                                      "config.json, %2 shared")
                                       .arg(experts)
                                       .arg(shared));
  QStringList dtypes;
  for (const auto& [name, bytes] : catalog->bytesByDtype())
    dtypes << QStringLiteral("%1: %2").arg(esc(name), mb(double(bytes)));
  row(tr("Storage"), dtypes.join(QStringLiteral(", ")));
  h += QStringLiteral("</table><h3>%1</h3><table cellspacing=4>").arg(tr("Parameters by block"));
  for (const auto& [block, params] : catalog->paramsByBlock())
    row(esc(block),
        QStringLiteral("%1 (%2 %)")
            .arg(locale.toString(qlonglong(params)))
            .arg(100.0 * double(params) / double(std::max<int64_t>(1, catalog->paramsTotal())), 0, 'f', 1));
  h += QStringLiteral("</table>");
  const auto unclassified = catalog->unclassified();
  if (!unclassified.empty())
    h += tr("<p><b>%1 tensor(s) not recognised</b> (kept as-is): %2</p>")
             .arg(unclassified.size())
             .arg(esc(unclassified.front()) + (unclassified.size() > 1 ? QStringLiteral(", …") : QString()));

  h += QStringLiteral("<h3>%1</h3>").arg(tr("Statistics"));
  const ModelStats* stats = session.stats();
  if (!stats) {
    h += tr("<p>Computing in the background…</p>");
  } else {
    h += tr("<p>%1 rows, %2 read%3. Summary in %4 s, statistics complete in %5 s after opening.</p>")
             .arg(stats->rows.size())
             .arg(mb(double(stats->bytes)))
             .arg(stats->from_cache ? tr(" (from the cache)") : QString())
             .arg(session.secondsToSummary(), 0, 'f', 2)
             .arg(session.secondsToStats(), 0, 'f', 2);
    std::vector<const StatsRow*> byKurtosis;
    for (std::size_t i = 0; i < std::min(stats->rows.size(), catalog->matrices().size()); ++i)
      byKurtosis.push_back(&stats->rows[i]);
    std::sort(byKurtosis.begin(), byKurtosis.end(),
              [](const StatsRow* a, const StatsRow* b) { return a->stats.kurtosis > b->stats.kurtosis; });
    h +=
        tr("<p>Heaviest tails (hardest to quantize at low bits):</p><table cellspacing=4><tr><th "
           "align=left>tensor</th>"
           "<th>kurtosis</th><th>abs-max</th><th>&gt;3σ</th></tr>");
    for (std::size_t i = 0; i < std::min<std::size_t>(8, byKurtosis.size()); ++i)
      h += QStringLiteral(
               "<tr><td><code>%1</code></td><td align=right>%2</td><td align=right>%3</td><td "
               "align=right>%4</td></tr>")
               .arg(esc(byKurtosis[i]->name))
               .arg(byKurtosis[i]->stats.kurtosis, 0, 'f', 2)
               .arg(byKurtosis[i]->stats.absmax, 0, 'g', 4)
               .arg(byKurtosis[i]->stats.frac_gt3sigma, 0, 'g', 3);
    h += QStringLiteral("</table>");
  }
  if (!session.results().empty()) {
    double sum = 0;
    for (const auto& [m, r] : session.results()) sum += r.relError;
    h += tr("<h3>Last quantization</h3><p>%1 on %2 tensors: mean relative error %3.</p>")
             .arg(session.resultSettings().describe().toHtmlEscaped())
             .arg(session.results().size())
             .arg(sum / double(session.results().size()), 0, 'f', 5);
  }
  return h;
}

}  // namespace moewb::gui

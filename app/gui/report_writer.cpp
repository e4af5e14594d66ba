// SPDX-License-Identifier: MIT
#include "report_writer.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTextStream>
#include <cmath>

#include "attention_page.h"
#include "charts/channel_magnitude_plot.h"
#include "charts/convergence_plot.h"
#include "charts/histogram_plot.h"
#include "charts/xy_plot.h"
#include "heatmap/heatmap_export.h"
#include "heatmap/heatmap_interaction.h"
#include "heatmap/heatmap_painter_canvas.h"
#include "kv_channels_page.h"
#include "main_window.h"
#include "models/attention_map_model.h"
#include "models/perplexity_table_model.h"
#include "moewb/atomic_file.h"
#include "moewb/engine/kv_stats.h"
#include "moewb/error.h"
#include "moewb/quant/analysis.h"
#include "report_data.h"
#include "workbench_session.h"

namespace moewb::gui {

namespace {

// Renders a heatmap with the QPainter canvas: works whether or not the on-screen view uses OpenGL and
// whether or not it is visible.
bool saveHeatmapImage(const ModelCatalog& catalog, HeatmapMetric metric, const std::vector<double>& values,
                      const QString& path) {
  HeatmapInteraction interaction;
  HeatmapPainterCanvas canvas(&interaction);
  canvas.resize(1200, 520);
  interaction.setWidgetSize(canvas.size());
  interaction.setData(fillHeatmap(catalog, buildHeatmapLayout(catalog), metric, values));
  return canvas.grab().save(path, "PNG");
}

QString csvField(const QString& s) {
  return s.contains(QLatin1Char(',')) || s.contains(QLatin1Char('"'))
             ? QLatin1Char('"') + QString(s).replace(QLatin1String("\""), QLatin1String("\"\"")) +
                   QLatin1Char('"')
             : s;
}

QString num(double v) {
  return std::isfinite(v) ? QString::number(v, 'g', 6) : QString();
}

}  // namespace

bool writeReport(const QString& directory, MainWindow& window, QString* error) {
  return writeReport(directory, collectReportData(*window.session()), error);
}

bool writeReport(const QString& directory, const ReportData& data, QString* error) {
  const auto catalog = data.catalog;
  if (!catalog) {
    if (error) *error = QObject::tr("No model is open.");
    return false;
  }
  try {
    StagingDirectory staging(std::filesystem::path(directory.toStdString()));
    const QDir out(QString::fromStdString(staging.path().string()));
    QStringList images;  // file base names, "title|file"

    auto addHeatmap = [&](HeatmapMetric metric, const std::vector<double>& values, const QString& title,
                          const QString& file) {
      if (!saveHeatmapImage(*catalog, metric, values, out.filePath(file)))
        throw Error("cannot render " + file.toStdString());
      images << title + QLatin1Char('|') + file;
    };
    // Every plot goes in as PNG (shown in the report) and SVG (for papers), rendered off-screen from the
    // report data (the plot widgets here are the writer's own, never the window's).
    auto addPlot = [&](PlotView& plot, const QString& name) {
      QString e;
      plot.resize(1000, 560);
      if (!plot.exportPng(out.filePath(name + QStringLiteral(".png")), &e) ||
          !plot.exportSvg(out.filePath(name + QStringLiteral(".svg")), &e))
        throw Error(e.toStdString());
      images << (plot.title().isEmpty() ? name : plot.title()) + QLatin1Char('|') + name +
                    QStringLiteral(".png");
    };
    addHeatmap(HeatmapMetric::Kurtosis, data.kurtosisValues, heatmapMetricName(HeatmapMetric::Kurtosis),
               QStringLiteral("heatmap-kurtosis.png"));
    // The run's ranks beside its errors; the current policy's only as what it is (not run yet) when it
    // differs, so the report never shows one run's errors under another policy's ranks.
    const bool runHasRanks = data.lastRun && !data.lastRun->policy.isEmpty();
    const bool currentDiffers = !runHasRanks || data.lastRun->policy != data.policy.expression ||
                                !data.policy.overrides.empty();
    if (runHasRanks)
      addHeatmap(HeatmapMetric::AssignedRank, data.runRankValues,
                 QObject::tr("Ranks of the last run (policy %1)").arg(data.lastRun->policy),
                 QStringLiteral("heatmap-run-rank.png"));
    if (currentDiffers)
      addHeatmap(HeatmapMetric::AssignedRank, data.rankValues,
                 data.lastRun ? QObject::tr("%1 by the current policy %2 (not run yet)")
                                    .arg(heatmapMetricName(HeatmapMetric::AssignedRank), data.policy.expression)
                              : QObject::tr("%1 (policy %2)")
                                    .arg(heatmapMetricName(HeatmapMetric::AssignedRank), data.policy.expression),
                 QStringLiteral("heatmap-rank.png"));
    if (data.lastRun)
      addHeatmap(HeatmapMetric::RelativeError, data.errorValues,
                 QObject::tr("%1 of the last run (%2)")
                     .arg(heatmapMetricName(HeatmapMetric::RelativeError), data.lastRun->description),
                 QStringLiteral("heatmap-error.png"));

    if (const auto& t = data.tensor) {
      const QString tensor = QStringLiteral("%1 [%2 × %3]").arg(t->name).arg(t->rows).arg(t->cols);
      HistogramPlot histogram;
      histogram.setHistogram(t->histLo, t->histHi, t->histogram);
      if (t->analysis)
        histogram.setGrid(t->analysis->gridLevels, QObject::tr("%1-bit grid (widest group: row %2, group %3)")
                                                       .arg(t->analysis->bits)
                                                       .arg(t->analysis->gridRow)
                                                       .arg(t->analysis->gridGroup));
      histogram.setTitle(QObject::tr("Value histogram of %1").arg(tensor));
      addPlot(histogram, QStringLiteral("histogram"));
      if (t->analysis) {
        const TensorAnalysis& a = *t->analysis;
        const auto& sv = a.singularValues;
        const int rank = quant::rankAtTau(sv, t->tau);
        XyPlot spectrum(QStringLiteral("spectrum"));
        showResidualSpectrum(spectrum, sv,
                             sv.empty() ? std::nullopt : std::optional<double>(t->tau * sv.front()), rank);
        spectrum.setTitle(QObject::tr("Residual spectrum of %1 (HQQ %2-bit g%3): rank %4 at τ = %5")
                              .arg(tensor)
                              .arg(a.bits)
                              .arg(a.group)
                              .arg(rank)
                              .arg(t->tau));
        addPlot(spectrum, QStringLiteral("spectrum"));
        XyPlot errorVsRank(QStringLiteral("error-vs-rank"));
        showErrorVsRank(errorVsRank, a.ranks, a.errorAtRank, t->assignedRank);
        errorVsRank.setTitle(
            QObject::tr("Error vs compensator rank of %1 (HQQ %2-bit residual)").arg(tensor).arg(a.bits));
        addPlot(errorVsRank, QStringLiteral("error-vs-rank"));
      }
      // The last run's curve when it quantized this tensor with MiLo, else the analysis's preview.
      ConvergencePlot convergence;
      QString curveOf;
      if (!t->runCurve.empty() && data.lastRun) {
        curveOf = QObject::tr("last run (%1), rank %2").arg(data.lastRun->description).arg(t->runRank);
        for (std::size_t i = 0; i < t->runCurve.size(); ++i)
          convergence.addPoint(curveOf, int(i) + 1, t->runCurve[i]);
      } else if (t->analysis && !t->analysis->miloCurve.empty()) {
        curveOf = QObject::tr("MiLo preview, rank %1 (stored: %2)")
                      .arg(t->analysis->miloRank)
                      .arg(t->analysis->miloError, 0, 'f', 4);
        for (std::size_t i = 0; i < t->analysis->miloCurve.size(); ++i)
          convergence.addPoint(curveOf, int(i) + 1, t->analysis->miloCurve[i]);
      }
      if (!curveOf.isEmpty()) {
        convergence.setTitle(QObject::tr("MiLo convergence of %1: %2").arg(tensor, curveOf));
        addPlot(convergence, QStringLiteral("convergence"));
      }
    }

    // Engine measurements the session has: expert frequency, K/V capture plots.
    if (const std::optional<ExpertFrequencyRecord>& f = data.frequency) {
      QString e;
      if (!exportHeatmapImage(frequencyHeatmap(*f), out.filePath(QStringLiteral("expert-frequency.png")),
                              QSize(1000, 420), &e))
        throw Error(e.toStdString());
      writeFileAtomically(staging.path() / "expert-frequency.json", f->toJson());
      writeFileAtomically(staging.path() / "expert-frequency.csv", f->toCsv());
      const QString on =
          f->source.isEmpty() ? QString() : QObject::tr(" on %1").arg(QFileInfo(f->source).fileName());
      images << QObject::tr("Expert frequency (fraction of tokens routed%1)").arg(on) +
                    QStringLiteral("|expert-frequency.png");
    }
    if (const auto& kv = data.kv) {
      AttentionMapModel attention;
      attention.setCapture(kv->capture);
      XyPlot sink(QStringLiteral("attention-first-tokens"));
      showFirstTokenMass(sink, attention);
      sink.setTitle(QObject::tr("Attention on the first tokens (%1)").arg(kv->source));
      addPlot(sink, QStringLiteral("attention-first-tokens"));
      ChannelMagnitudePlot keys(QStringLiteral("key-channels")), values(QStringLiteral("value-channels"));
      showChannelMagnitudes(keys, values, *kv->capture, kv->layer, engine::kAllKvHeads, kv->outlierFactor,
                            false);
      addPlot(keys, QStringLiteral("key-channels"));
      addPlot(values, QStringLiteral("value-channels"));
    }
    PerplexityTableModel perplexity;
    perplexity.setRows(data.perplexity);
    const PerplexityRequest& pplSettings = data.perplexitySettings;
    if (perplexity.rowCount() > 0)
      writeFileAtomically(staging.path() / "perplexity.csv", perplexity.toCsv().toStdString());

    // Numbers: one row per weight matrix.
    QJsonArray rows;
    QString csv = QStringLiteral(
        "tensor,layer,block,proj,expert,rows,cols,std,absmax,kurtosis,frac_gt3sigma,rank,rel_error,run_rank\n");
    const auto& matrices = catalog->matrices();
    for (std::size_t i = 0; i < matrices.size(); ++i) {
      const TensorClass& c = catalog->classOf(matrices[i].tensor);
      const ReportTensorRow& t = data.tensors.at(i);
      const ReportTensorRow* s = t.haveStats ? &t : nullptr;
      const int rank = t.rank;
      const double err = t.relError;
      const int expert = matrices[i].slice >= 0 ? matrices[i].slice : c.expert;
      const QString name = QString::fromStdString(matrices[i].name);
      const QString block =
          QString::fromUtf8(blockName(c.block).data(), qsizetype(blockName(c.block).size()));
      const QString proj = QString::fromUtf8(projName(c.proj).data(), qsizetype(projName(c.proj).size()));
      csv += QStringList{csvField(name),
                         QString::number(c.layer),
                         block,
                         proj,
                         QString::number(expert),
                         QString::number(matrices[i].rows),
                         QString::number(matrices[i].cols),
                         s ? num(s->std) : QString(),
                         s ? num(s->absmax) : QString(),
                         s ? num(s->kurtosis) : QString(),
                         s ? num(s->fracGt3Sigma) : QString(),
                         rank >= 0 ? QString::number(rank) : QString(),
                         num(err),
                         t.runRank >= 0 ? QString::number(t.runRank) : QString()}
                 .join(QLatin1Char(','));
      csv += QLatin1Char('\n');
      QJsonObject o{{"tensor", name},
                    {"layer", c.layer},
                    {"block", block},
                    {"proj", proj},
                    {"expert", expert},
                    {"rows", qint64(matrices[i].rows)},
                    {"cols", qint64(matrices[i].cols)}};
      if (s) {
        o["std"] = s->std;
        o["absmax"] = s->absmax;
        o["kurtosis"] = s->kurtosis;
        o["frac_gt3sigma"] = s->fracGt3Sigma;
      }
      if (rank >= 0) o["rank"] = rank;
      if (t.runRank >= 0) o["run_rank"] = t.runRank;
      if (std::isfinite(err)) o["rel_error"] = err;
      rows.append(o);
    }
    const PolicyEvaluation& totals = data.totals;
    const PolicyState& policy = data.policy;
    QJsonObject json{{"model", data.modelPath}, {"policy", policy.toJson()}, {"tensors", rows}};
    if (totals.ok)
      json["totals"] = QJsonObject{{"average_rank", totals.averageRank},
                                   {"compensator_mb", totals.compensatorMB},
                                   {"total_mb", totals.totalMB},
                                   {"original_mb", totals.originalMB},
                                   {"bits_per_weight", totals.bitsPerWeight}};
    if (data.lastRun) {
      json["results_settings"] = data.lastRun->settings.toJson();
      json["last_run"] = QJsonObject{{"settings", data.lastRun->description},
                                     {"policy", data.lastRun->policy},
                                     {"matrices", qint64(data.lastRun->matrices)},
                                     {"mean_rel_error", data.lastRun->meanRelError},
                                     {"max_rel_error", data.lastRun->maxRelError},
                                     {"worst_tensor", data.lastRun->worstTensor}};
    }
    if (data.tensor) json["inspected_tensor"] = data.tensor->name;
    if (perplexity.rowCount() > 0) {
      QJsonArray variants;
      for (const PerplexityRow& r : perplexity.rows())
        variants.append(QJsonObject{{"variant", r.variant},
                                    {"perplexity", r.perplexity},
                                    {"tokens_scored", qint64(r.tokensScored)},
                                    {"weight_bytes", qint64(r.weightBytes)},
                                    {"replaced_matrices", qint64(r.replacedMatrices)}});
      json["perplexity"] = QJsonObject{{"text", pplSettings.textFile},
                                       {"seq_len", pplSettings.seqLen},
                                       {"max_windows", pplSettings.maxWindows},
                                       {"variants", variants}};
    }
    writeFileAtomically(staging.path() / "tensors.json", QJsonDocument(json).toJson().toStdString());
    writeFileAtomically(staging.path() / "tensors.csv", csv.toStdString());

    // HTML and Markdown with the same content.
    QString html = QStringLiteral(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>MoE Workbench report</title>"
        "<style>body{font-family:sans-serif;max-width:1250px;margin:auto}img{max-width:100%}</style>"
        "</head><body><h1>MoE Workbench report</h1>");
    html += data.summaryHtml;
    QString md = QStringLiteral("# MoE Workbench report\n\nModel: `%1`\n\n").arg(data.modelPath);
    md += QStringLiteral("- Family: %1, %2 parameters, %3 weight matrices\n")
              .arg(QString::fromStdString(catalog->family()))
              .arg(catalog->paramsTotal())
              .arg(matrices.size());
    const bool runPolicyDiffers = data.lastRun && data.lastRun->policy != policy.expression;
    md += QStringLiteral("- %1: `%2`, %3 override(s)\n")
              .arg(runPolicyDiffers ? QObject::tr("Current policy (not run yet)") : QObject::tr("Policy"))
              .arg(policy.expression)
              .arg(policy.overrides.size());
    if (totals.ok) {
      const QString line =
          QObject::tr("average rank %1, compensators %2 MB, total %3 MB of %4 MB, %5 bits/weight")
              .arg(totals.averageRank, 0, 'f', 2)
              .arg(totals.compensatorMB, 0, 'f', 2)
              .arg(totals.totalMB, 0, 'f', 2)
              .arg(totals.originalMB, 0, 'f', 2)
              .arg(totals.bitsPerWeight, 0, 'f', 3);
      md += QStringLiteral("- Totals: %1\n").arg(line);
      html += QStringLiteral("<h3>%1</h3><p><code>%2</code>: %3</p>")
                  .arg(runPolicyDiffers ? QObject::tr("Current policy (not run yet)") : QObject::tr("Policy"),
                       policy.expression.toHtmlEscaped(), line);
    }
    if (const auto& run = data.lastRun) {
      const QString line =
          QObject::tr("%1: %n matrices, relative error mean %2, max %3 (%4)", nullptr, int(run->matrices))
              .arg(run->description)
              .arg(run->meanRelError, 0, 'f', 4)
              .arg(run->maxRelError, 0, 'f', 4)
              .arg(run->worstTensor) +
          (run->policy.isEmpty() ? QString() : QObject::tr("; rank policy %1").arg(run->policy));
      md += QStringLiteral("\n## Last run\n\n%1\n").arg(line);
      html += QStringLiteral("<h3>Last run</h3><p>%1</p>").arg(line.toHtmlEscaped());
    }
    if (perplexity.rowCount() > 0) {
      const QString how =
          QObject::tr(
              "On `%1`, windows of %2 tokens, %3; memory = the model's weights as "
              "stored with the variant's matrices.")
              .arg(QFileInfo(pplSettings.textFile).fileName())
              .arg(pplSettings.seqLen)
              .arg(pplSettings.maxWindows ? QObject::tr("first %n window(s)", nullptr, pplSettings.maxWindows)
                                          : QObject::tr("all windows"));
      md += QStringLiteral("\n## Perplexity\n\n%1\n\n%2\n([perplexity.csv](perplexity.csv))\n")
                .arg(how, perplexity.toMarkdown());
      html += QStringLiteral(
                  "<h3>Perplexity</h3><p>%1</p><table border=\"1\" cellspacing=\"0\" cellpadding=\"4\"><tr>")
                  .arg(how.toHtmlEscaped());
      for (int c = 0; c < perplexity.columnCount(); ++c)
        html += QStringLiteral("<th>%1</th>")
                    .arg(perplexity.headerData(c, Qt::Horizontal).toString().toHtmlEscaped());
      html += QStringLiteral("</tr>");
      for (int r = 0; r < perplexity.rowCount(); ++r) {
        html += QStringLiteral("<tr>");
        for (int c = 0; c < perplexity.columnCount(); ++c)
          html += QStringLiteral("<td>%1</td>").arg(perplexity.index(r, c).data().toString().toHtmlEscaped());
        html += QStringLiteral("</tr>");
      }
      html += QStringLiteral("</table>");
    }
    md += QStringLiteral("\nEvery number: [tensors.csv](tensors.csv), [tensors.json](tensors.json).\n\n");
    html += QStringLiteral(
        "<p>Every number: <a href=\"tensors.csv\">tensors.csv</a>, <a "
        "href=\"tensors.json\">tensors.json</a>.</p>");
    for (const QString& entry : images) {
      const QString title = entry.section(QLatin1Char('|'), 0, 0),
                    file = entry.section(QLatin1Char('|'), 1, 1);
      md += QStringLiteral("## %1\n\n![%1](%2)\n\n").arg(title, file);
      html += QStringLiteral("<h3>%1</h3><img src=\"%2\" alt=\"%1\">").arg(title.toHtmlEscaped(), file);
    }
    html += QStringLiteral("</body></html>\n");
    writeFileAtomically(staging.path() / "report.html", html.toStdString());
    writeFileAtomically(staging.path() / "report.md", md.toStdString());
    staging.commit();
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  return true;
}

}  // namespace moewb::gui

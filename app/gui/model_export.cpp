// SPDX-License-Identifier: MIT
#include "model_export.h"

#include <QPointer>

#include "moewb/jobs/quantize_job.h"
#include "moewb/methods/registry.h"
#include "moewb/output_target.h"
#include "moewb/quant/export.h"
#include "moewb/quant/model_quantizer.h"
#include "quant_device_choice.h"
#include "workbench_session.h"
#include "engine_device_choice.h"

namespace moewb::gui {

int startModelExport(WorkbenchSession& session, const QuantSettings& settings, const QString& policyText,
                     const QString& directory, ExportKind kind) {
  const auto catalog = session.catalog();
  if (!catalog) return 0;
  auto quantization = session.quantization();
  std::vector<int> ranks;
  std::vector<std::size_t> matrices;
  if (!quantization) {
    matrices = quant::quantizableMatrices(*catalog);
    for (std::size_t m : matrices)
      ranks.push_back(m < session.ranks().size() ? std::max(0, session.ranks()[m]) : 0);
  }
  const std::string policy = policyText.toStdString();
  const quant::ComputeDevice device = settings.computeDevice();
  const std::filesystem::path out = directory.toStdString();
  JobRunner* jobs = session.jobs();
  const QString title = QObject::tr("Export to %1").arg(directory);
  int id = 0;
  id = jobs->submit(
      title,
      [catalog, quantization, settings, matrices, ranks, policy, out, device, kind](const ProgressFn& progress) {
        // The folder was chosen (and an existing one confirmed) in the save dialog: replacing it is allowed,
        // but only when it is a previous moewb export and never the model itself (moewb/output_target.h);
        // checked before the quantization, not after it.
        OutputTarget target{out, OutputKind::Folder, "export", true, quant::exportInputs(catalog->checkpoint())};
        checkOutputTarget(target);
        std::shared_ptr<const quant::ModelQuantization> q = quantization;
        if (!q) {
          // No completed run: quantize now, the first half of the progress bar, on the chosen device
          // (the same choice as a quantization job's).
          jobs::QuantizeRequest request;
          request.catalog = catalog;
          request.settings = toCoreSettings(settings);
          request.matrices = matrices;
          if (methods::weightMethod(request.settings.method).usesRankPolicy()) {
            request.ranks = ranks;
            request.policy = policy;
          }
          std::string note;
          const std::unique_ptr<quant::BatchBackend> backend = app::quantBackendForDevice(device, &note);
          if (!note.empty() && !progress(0.0, note)) throw moewb::Cancelled();
          request.pipeline.backend = backend.get();
          // The calibration passes (GPTQ, QMoE) run on the GPU engine where the quantizer runs on the GPU.
          request.calibration_backend = backend ? app::sharedGpuEngine() : nullptr;
          q = std::make_shared<quant::ModelQuantization>(
              jobs::runQuantizeJob(request, [&](double f, std::string_view stage) { return progress(f * 0.5, stage); })
                  .quantization);
        }
        const double offset = quantization ? 0.0 : 0.5, scale = quantization ? 1.0 : 0.5;
        quant::ExportOptions options;
        options.replace_existing = true;
        const ProgressFn write_progress = [&](double f, std::string_view stage) {
          return progress(offset + f * scale, stage);
        };
        if (kind == ExportKind::Dequantized)
          quant::writeDequantizedModel(*catalog, *q, out, options, write_progress);
        else
          quant::writeCompressedModel(*catalog, *q, out, options, write_progress);
      });
  return id;
}

}  // namespace moewb::gui

// SPDX-License-Identifier: MIT
#pragma once
#include <QString>

#include "quant_settings.h"

namespace moewb::gui {
class WorkbenchSession;

// What an export writes: the compressed checkpoint (`moewb quantize --out`) or a bf16 checkpoint of the
// dequantized weights in the source's layout that HF transformers loads unchanged (`--dequantized`).
enum class ExportKind { Compressed, Dequantized };

// Queues a job that writes the checkpoint with the core exporter (writeCompressedModel or
// writeDequantizedModel, the writers of `moewb quantize --out [--dequantized]`). It writes the last
// completed run when there is one; otherwise it quantizes first with `settings` and the session's ranks.
// Files appear in `directory` only when the job completes; a cancelled or failed export leaves nothing.
// Returns the job id (0: no model open).
int startModelExport(WorkbenchSession& session, const QuantSettings& settings, const QString& policyText,
                     const QString& directory, ExportKind kind = ExportKind::Compressed);

}  // namespace moewb::gui

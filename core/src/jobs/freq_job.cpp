// SPDX-License-Identifier: MIT
#include "moewb/jobs/freq_job.h"

#include <algorithm>

#include "moewb/engine/evaluate.h"
#include "moewb/engine/variants.h"
#include "moewb/error.h"

namespace moewb::jobs {

engine::ExpertFrequencyFile runFreqJob(const FreqRequest& r, const ProgressFn& progress) {
  if (r.model.empty()) throw Error("freq: no model");
  if (!r.text.empty() && !r.ids.empty()) throw Error("freq: give --text or --ids, not both");
  auto engine = engine::MoeEngine::open(r.model);
  if (r.on_engine) r.on_engine(*engine);
  const auto ids = engine::loadEvaluationIds(r.model, r.text, r.ids, engine->config().bos_token_id, r.no_bos);
  engine::EvalOptions options;
  // A text shorter than one window is counted as one window of its own length.
  options.seq_len = static_cast<int>(std::min<int64_t>(r.seq_len, static_cast<int64_t>(ids.size())));
  options.max_windows = r.max_windows;
  if (options.seq_len < 2)
    throw Error(r.text.empty() ? std::string("freq: the text has fewer than 2 tokens")
                               : "freq: " + r.text + ": the text has fewer than 2 tokens");
  engine::ExpertFrequencyFile out;
  out.frequency = engine::measureExpertFrequency(*engine, ids, options, progress);
  out.model = engine->checkpoint().root();
  out.seq_len = options.seq_len;
  return out;
}

}  // namespace moewb::jobs

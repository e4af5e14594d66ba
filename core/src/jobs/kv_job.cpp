// SPDX-License-Identifier: MIT
#include "moewb/jobs/kv_job.h"

#include <optional>
#include <span>

#include "moewb/engine/tokenizer.h"
#include "moewb/error.h"
#include "moewb/output_target.h"
#include "moewb/quant/export.h"

namespace moewb::jobs {

KvJobResult runKvJob(const KvRequest& r, const ProgressFn& progress) {
  if (r.model.empty()) throw Error("kv: no model");
  const int given = int(!r.prompt.empty()) + int(!r.text.empty()) + int(!r.ids.empty());
  if (given == 0) throw Error("kv: give --prompt TEXT, --text FILE or --ids FILE");
  if (given > 1) throw Error("kv: give one of --prompt, --text and --ids");
  if (r.max_tokens < 1) throw Error("kv: --max-tokens must be at least 1");
  auto engine = engine::MoeEngine::open(r.model);
  if (!r.out.empty()) {
    OutputTarget target{r.out, OutputKind::File, "kv: --out", r.replace_existing,
                        quant::exportInputs(engine->checkpoint())};
    target.inputs.insert(target.inputs.end(), {r.text, r.ids});
    checkOutputTarget(target);
    checkOutputSpace(target, 0);
  }
  if (r.on_engine) r.on_engine(*engine);
  std::vector<int32_t> ids;
  std::unique_ptr<engine::Tokenizer> tokenizer;
  if (!r.ids.empty()) {
    ids = engine::readTokenIdsFile(r.ids);
  } else {
    tokenizer = engine::Tokenizer::forModel(r.model);
    const std::string text = r.prompt.empty() ? engine::readTextFile(r.text) : r.prompt;
    ids = engine::tokenizeForEvaluation(*tokenizer, text,
                                        r.no_bos ? std::nullopt : engine->config().bos_token_id);
  }
  if (static_cast<int>(ids.size()) > r.max_tokens) ids.resize(std::size_t(r.max_tokens));
  auto capture =
      std::make_shared<engine::KvCapture>(engine::captureKv(*engine, ids, r.first_tokens, progress));
  if (tokenizer)
    for (int32_t id : ids) capture->pieces.push_back(tokenizer->decode(std::span<const int32_t>(&id, 1)));
  if (!r.out.empty()) engine::saveKvCapture(*capture, r.out);

  KvJobResult result;
  result.model = engine->checkpoint().root();
  result.sink_mass = capture->sinkMassPerLayer();
  // Outlier channels as the GUI's K/V channel view marks them (core's one definition, kv_stats.h).
  for (int l = 0; l < capture->layers; ++l)
    result.channels.push_back(engine::kvLayerChannels(*capture, l, r.outlier_factor));
  result.capture = std::move(capture);
  return result;
}

}  // namespace moewb::jobs

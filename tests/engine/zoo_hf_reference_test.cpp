// SPDX-License-Identifier: MIT
// The engine against Hugging Face transformers 5.17 on every zoo family: float32 logits of a 48-token
// prompt computed by HF (eager attention, fp32 from the bf16 zoo weights; tests/data/hf-zoo-references,
// made by tools/hf_reference/make_zoo_references.py) on the same model copies (config overrides, sliced
// KV heads) the engine runs here.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "moewb/engine/engine.h"
#include "moewb/npy.h"
#include "test_support.h"
#include "zoo_models.h"

namespace moewb::engine {
namespace {

// The bar of the issue: max|engine - HF| <= 1e-3 * max|HF| over all positions and the whole vocabulary.
constexpr double kMaxRelativeDiff = 1e-3;
// What float32 rounding leaves (measured 2.3e-7 .. 6.1e-7). Some real mistakes stay under the bar
// on these tiny models (YaRN's `truncate` read wrongly moves gpt_oss by 1.4e-4, Granite's attention
// multiplier ignored moves granitemoe-multipliers by 4e-4), so the tighter bar guards them too.
constexpr double kFloat32RoundingBar = 1e-5;

std::filesystem::path referenceDir(const std::string& name) {
  return test::sourceDir() / "tests" / "data" / "hf-zoo-references" / name;
}

class HfZooReference : public ::testing::TestWithParam<std::string> {};

TEST_P(HfZooReference, LogitsMatchTransformers) {
  const std::filesystem::path ref_dir = referenceDir(GetParam());
  ASSERT_TRUE(std::filesystem::exists(ref_dir / "case.json")) << ref_dir;
  nlohmann::json spec;
  std::ifstream(ref_dir / "case.json") >> spec;
  const std::string model = spec.at("model").get<std::string>();
  MOEWB_REQUIRE_SHARED("models/zoo/" + model);

  const int keep_kv_heads = spec.value("keep_kv_heads", nlohmann::json()).is_number_integer()
                                ? spec["keep_kv_heads"].get<int>()
                                : 0;
  // Cases whose tensors the reference script changed (random biases, a new dense layer) carry their
  // own model.safetensors; the zoo model still gives config.json.
  std::filesystem::path source = test::zooModel(model);
  if (spec.value("own_weights", false)) {
    source = test::makeTempDir("moewb-hf-case");
    std::filesystem::copy_file(test::zooModel(model) / "config.json", source / "config.json");
    std::filesystem::copy_file(ref_dir / "model.safetensors", source / "model.safetensors");
  }
  const auto dir =
      test::prepareModelCopy(source, spec.value("config_overrides", nlohmann::json::object()), keep_kv_heads);
  auto engine = MoeEngine::open(dir.string());
  SCOPED_TRACE(engine->config().describe());

  const NpyArray ids_npy = readNpy((ref_dir / "ids.npy").string());
  const NpyArray ref_npy = readNpy((ref_dir / "logits_fp32.npy").string());
  std::vector<int32_t> ids(ids_npy.data.begin(), ids_npy.data.end());
  ASSERT_EQ(ref_npy.shape, (std::vector<int64_t>{static_cast<int64_t>(ids.size()), engine->config().vocab}));
  const Eigen::Map<const MatrixRM> ref(ref_npy.data.data(), ref_npy.shape[0], ref_npy.shape[1]);

  const MatrixRM logits = engine->logits(ids);
  ASSERT_TRUE(logits.allFinite());
  const double max_ref = ref.cwiseAbs().maxCoeff();
  const double max_diff = (logits - ref).cwiseAbs().maxCoeff();
  const double ratio = max_diff / max_ref;
  RecordProperty("max_diff_ratio", fmt::format("{:.3g}", ratio));
  std::printf("[ HF ref   ] %-24s max|engine - HF| / max|HF| = %.3g (max|HF| %.4f)\n", GetParam().c_str(),
              ratio, max_ref);
  EXPECT_LE(ratio, kMaxRelativeDiff) << "max|diff| " << max_diff << ", max|HF| " << max_ref;
  EXPECT_LE(ratio, kFloat32RoundingBar) << "more than float32 rounding apart from HF";
}

INSTANTIATE_TEST_SUITE_P(Cases, HfZooReference,
                         ::testing::Values("mixtral", "qwen3_moe", "olmoe", "deepseek_v2", "qwen2_moe",
                                           "granitemoe", "granitemoe-multipliers", "gpt_oss",
                                           "gpt_oss-window8", "gpt_oss-biases-clamp", "llama4_text",
                                           "llama4_text-chunk8-nope", "llama4_text-dense-top2"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace moewb::engine

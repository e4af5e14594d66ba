// SPDX-License-Identifier: MIT
// Issue #39, item 4: numbers that were wrong without a word. NaN/Inf weights show in the statistics table,
// quantize stops (or, with --nonfinite skip, leaves them unquantized) naming every affected matrix and never
// writes a null error, a NaN perplexity is a failure, and inconsistent config values are errors naming the
// key or tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "moewb/checkpoint.h"
#include "moewb/engine/model_config.h"
#include "moewb/error.h"
#include "moewb/safetensors_writer.h"
#include "file_helpers.h"
#include "test_support.h"

namespace moewb::test {
namespace {

namespace fs = std::filesystem;

const std::string kPoisoned = "model.layers.0.self_attn.q_proj.weight";

// The demo model, copied, with tensors changed: `drop` left out, `poison` given a NaN and an Inf, and the
// config edited.
fs::path demoVariant(const std::string& poison, const std::string& drop,
                     const nlohmann::json& config_changes) {
  const fs::path dir = makeTempDir("moewb-silent") / "model";
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(demoModelDir()))
    if (e.path().extension() != ".safetensors" && e.path().filename() != "model.safetensors.index.json")
      fs::copy(e.path(), dir / e.path().filename());
  // Its shards, rewritten as one model.safetensors.
  const auto ckpt = Checkpoint::open(demoModelDir().string());
  SafetensorsWriter w;
  for (std::size_t t = 0; t < ckpt->tensors().size(); ++t) {
    const TensorRecord& rec = ckpt->tensor(t);
    if (rec.name == drop) continue;
    if (rec.name == poison) {
      std::vector<float> v = ckpt->readFloat(t);
      v[3] = std::numeric_limits<float>::quiet_NaN();
      v[7] = std::numeric_limits<float>::infinity();
      w.addFloat(rec.name, rec.dtype, rec.shape, v);
    } else {
      w.add(rec.name, rec.dtype, rec.shape, ckpt->bytes(t));
    }
  }
  w.write(dir / "model.safetensors");
  nlohmann::json config = nlohmann::json::parse(slurp(dir / "config.json"));
  if (config_changes.is_object()) config.update(config_changes);  // {} reads as null
  std::ofstream(dir / "config.json") << config.dump(1);
  return dir;
}

std::string configError(const fs::path& model) {
  try {
    engine::parseModelConfig(*Checkpoint::open(model.string()));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SilentNumbers, StatsTableShowsNonFiniteValues) {
  const fs::path model = demoVariant(kPoisoned, "", {});
  std::string out, err;
  ASSERT_EQ(
      runCli("stats " + quoted(model) + " --no-cache --matrices-only --filter 'layer:0 block:attention'",
             &out, &err),
      0)
      << err;
  EXPECT_NE(out.find("nan/inf"), std::string::npos) << "a column for them: " << out;
  const std::size_t row = out.find(kPoisoned);
  ASSERT_NE(row, std::string::npos) << out;
  const std::string line = out.substr(row, out.find('\n', row) - row);
  EXPECT_TRUE(line.ends_with(" 2")) << "one NaN and one Inf, in the last column: " << line;
  EXPECT_NE(err.find(kPoisoned), std::string::npos) << "and a line naming the tensor: " << err;
}

TEST(SilentNumbers, QuantizeStopsOrSkipsNamingNonFiniteMatrices) {
  const fs::path model = demoVariant(kPoisoned, "", {});
  for (const std::string method : {"rtn", "hqq", "milo --max-iters 2"}) {
    SCOPED_TRACE(method);
    const fs::path out_dir = model.parent_path() / method.substr(0, method.find(' '));
    std::string out, err;
    EXPECT_EQ(runCli("quantize " + quoted(model) + " --method " + method +
                         " --only 'model.layers.0.*' --out " + quoted(out_dir),
                     &out, &err),
              1);
    EXPECT_NE(err.find(kPoisoned), std::string::npos) << err;
    EXPECT_NE(err.find("--nonfinite skip"), std::string::npos) << err;
    EXPECT_FALSE(fs::exists(out_dir)) << "nothing exported";

    ASSERT_EQ(runCli("quantize " + quoted(model) + " --method " + method +
                         " --only 'model.layers.0.*' --nonfinite skip --force --out " + quoted(out_dir),
                     &out, &err),
              0)
        << err;
    EXPECT_NE(err.find(kPoisoned), std::string::npos) << "the skipped matrix is named: " << err;
    const nlohmann::json manifest = nlohmann::json::parse(slurp(out_dir / "manifest.json"));
    EXPECT_FALSE(manifest.at("tensors").contains(kPoisoned)) << "left as it was (copied)";
    for (const auto& [name, entry] : manifest.at("tensors").items())
      EXPECT_TRUE(entry.at("rel_error").is_number()) << name << ": " << entry.at("rel_error");
  }
}

TEST(SilentNumbers, NanPerplexityIsAFailure) {
  const fs::path model = demoVariant("model.norm.weight", "", {});
  std::string out, err;
  EXPECT_EQ(runCli("eval " + quoted(model) + " --seq-len 16 --max-windows 1 --text " +
                       quoted(sourceDir() / "resources/demo-text/sample.txt"),
                   &out, &err),
            1);
  EXPECT_NE(err.find("not a number"), std::string::npos) << err;
}

TEST(SilentNumbers, InconsistentConfigIsAnErrorNamingTheKeyOrTensor) {
  EXPECT_NE(configError(demoVariant("", "", {{"rms_norm_eps", -1}})).find("rms_norm_eps"), std::string::npos);
  const std::string untied = configError(demoVariant("", "lm_head.weight", {{"tie_word_embeddings", false}}));
  EXPECT_NE(untied.find("lm_head.weight"), std::string::npos) << untied;
  EXPECT_NE(untied.find("tie_word_embeddings"), std::string::npos) << untied;
  EXPECT_EQ(configError(demoVariant("", "lm_head.weight", {{"tie_word_embeddings", true}})), "")
      << "a tied model has no lm_head.weight";
}

TEST(SilentNumbers, SeqLenAboveMaxPositionEmbeddingsWarns) {
  const fs::path model = demoVariant("", "", {{"max_position_embeddings", 8}});
  std::string out, err;
  ASSERT_EQ(runCli("eval " + quoted(model) + " --seq-len 16 --max-windows 1 --text " +
                       quoted(sourceDir() / "resources/demo-text/sample.txt"),
                   &out, &err),
            0)
      << err;
  EXPECT_NE(err.find("max_position_embeddings"), std::string::npos) << err;
}

}  // namespace
}  // namespace moewb::test

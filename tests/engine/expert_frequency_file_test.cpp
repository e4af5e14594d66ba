// SPDX-License-Identifier: MIT
// The `moewb freq` file is read by one parser: the rank policies (quant::ExpertFrequencies) see the same
// counts as the measurement it was written from, JSON and CSV alike, and a malformed file is refused with
// its name, the line or field at fault and what was expected.
#include <gtest/gtest.h>

#include <fstream>

#include "moewb/engine/expert_frequency.h"
#include "moewb/error.h"
#include "moewb/quant/rank_policy.h"
#include "test_support.h"

namespace moewb::engine {
namespace {

namespace fs = std::filesystem;

ExpertFrequency measured() {
  ExpertFrequency f;
  f.tokens = 128;
  f.top_k = 2;
  f.num_experts = 4;
  f.layers = {{1, {100, 60, 0, 96}}, {3, {64, 64, 64, 64}}};
  return f;
}

fs::path write(const fs::path& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name, std::ios::binary) << text;
  return dir / name;
}

void expectSameMeasurement(const ExpertFrequency& a, const ExpertFrequency& b) {
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.top_k, b.top_k);
  EXPECT_EQ(a.num_experts, b.num_experts);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (std::size_t i = 0; i < a.layers.size(); ++i) {
    EXPECT_EQ(a.layers[i].layer, b.layers[i].layer);
    EXPECT_EQ(a.layers[i].counts, b.layers[i].counts);
  }
}

// Guards: what `moewb freq --json/--csv` writes reads back as the measurement, and the rank policies
// read exactly these counts from the same files.
TEST(ExpertFrequencyFile, WrittenFilesReadBackTheSameThroughEveryReader) {
  const fs::path dir = test::makeTempDir("moewb-freq-file");
  const ExpertFrequencyFile file{measured(), "/models/m", 64};
  const fs::path json = write(dir, "f.json", file.toJson().dump(2));
  const fs::path csv = write(dir, "f.csv", file.frequency.toCsv());
  for (const fs::path& p : {json, csv}) {
    SCOPED_TRACE(p.string());
    const ExpertFrequencyFile back = loadExpertFrequencyFile(p);
    expectSameMeasurement(back.frequency, file.frequency);
    const quant::ExpertFrequencies policy = quant::ExpertFrequencies::load(p);
    ASSERT_EQ(policy.counts.size(), 2u);
    EXPECT_EQ(policy.counts.at(1), (std::vector<double>{100, 60, 0, 96}));
    EXPECT_EQ(policy.counts.at(3), (std::vector<double>{64, 64, 64, 64}));
  }
  const ExpertFrequencyFile back = loadExpertFrequencyFile(json);
  EXPECT_EQ(back.model, "/models/m");
  EXPECT_EQ(back.seq_len, 64);
  EXPECT_EQ(loadExpertFrequencyFile(csv).seq_len, 0);  // the CSV does not say
}

TEST(ExpertFrequencyFile, HandWrittenCsvAndJsonAreAccepted) {
  // Three columns, no header, layers out of order, an expert left out (counts 0), "30.0" is 30.
  const auto f = parseExpertFrequencyFile("\n3,1,5\n0,0,30.0\n0,1,10\n3,0,5\n\n", "hand.csv");
  ASSERT_EQ(f.frequency.layers.size(), 2u);
  EXPECT_EQ(f.frequency.layers[0].layer, 0);
  EXPECT_EQ(f.frequency.layers[0].counts, (std::vector<int64_t>{30, 10}));
  EXPECT_EQ(f.frequency.layers[1].counts, (std::vector<int64_t>{5, 5}));
  EXPECT_EQ(f.frequency.tokens, 0);  // unknown without the fraction column
  EXPECT_EQ(f.frequency.num_experts, 2);
  // The JSON with extra fields (the device the CLI adds) and no token count.
  const auto j = parseExpertFrequencyFile(R"({"device":"cpu","layers":[{"layer":2,"counts":[1,0,3]}]})", "j");
  EXPECT_EQ(j.frequency.layers.at(0).counts, (std::vector<int64_t>{1, 0, 3}));
  EXPECT_EQ(j.frequency.num_experts, 3);
  EXPECT_EQ(quant::ExpertFrequencies::fromJson(R"({"layers":[{"layer":0,"counts":[30,10]}]})").counts.at(0),
            (std::vector<double>{30, 10}));
}

// Guards: a broken file never becomes silently wrong counts; the message names the file, where and what
// was expected (both readers: the policies and the GUI go through this one).
TEST(ExpertFrequencyFile, MalformedFilesNameTheFileAndWhatWasExpected) {
  const fs::path dir = test::makeTempDir("moewb-freq-bad");
  struct Case {
    const char* name;
    const char* text;
    const char* expected;  // in the message, after the file name
  };
  const Case cases[] = {
      {"word.csv", "layer,expert,count,fraction\n0,1,seven,0.1\n",
       "word.csv:2: expected 'layer,expert,count"},
      {"columns.csv", "0,1\n", "columns.csv:1: expected 'layer,expert,count"},
      {"negative.csv", "0,0,-4\n", "negative.csv:1: expected"},
      {"fractional.csv", "0,0,2.5\n", "fractional.csv:1: expected"},
      {"twice.csv", "0,0,1\n0,0,2\n", "twice.csv:2: layer 0 expert 0 appears twice"},
      {"empty.csv", "layer,expert,count\n", "empty.csv: no frequency rows"},
      {"trailing.csv", "0,0,12abc\n", "trailing.csv:1: expected"},
      {"syntax.json", "{\"layers\": [", "syntax.json: expected the JSON of `moewb freq --json`"},
      {"nolayers.json", "{\"tokens\": 3}", "nolayers.json: expected the JSON of `moewb freq --json`"},
      {"count.json", R"({"layers":[{"layer":0,"counts":[1,"x"]}]})", "layers[0].counts[1]"},
      {"negjson.json", R"({"layers":[{"layer":0,"counts":[-1]}]})", "layers[0].counts[0]"},
      {"dup.json", R"({"layers":[{"layer":0,"counts":[1]},{"layer":0,"counts":[2]}]})",
       "layer 0 appears twice"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path p = write(dir, c.name, c.text);
    for (int reader = 0; reader < 2; ++reader) {
      try {
        if (reader == 0)
          loadExpertFrequencyFile(p);
        else
          quant::ExpertFrequencies::load(p);
        ADD_FAILURE() << "accepted by reader " << reader;
      } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind(p.string(), 0), 0u) << msg;  // starts with the file
        EXPECT_NE(msg.find(c.expected), std::string::npos) << msg;
      }
    }
  }
  try {
    loadExpertFrequencyFile(dir / "missing.json");
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.json: cannot open"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moewb::engine

// SPDX-License-Identifier: MIT
// RTN, HQQ and MiLo exports of the demo model are byte for byte what the quantizer wrote before the
// methods moved into the registry: every file of each export is hashed and compared with hashes recorded
// from the earlier build (tests/data/export-golden/hashes.json, written by tools/export_golden_hashes.py
// from that build's exports). Only the manifest's "source" (the demo model's absolute path) is blanked.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_support.h"

namespace {

namespace fs = std::filesystem;

// FNV-1a, 64 bits: a fingerprint of the bytes (not a security hash), the same as the recording script's.
std::string fingerprint(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string blankSource(std::string manifest) {
  const std::string key = "\"source\": \"";
  const std::size_t at = manifest.find(key);
  if (at == std::string::npos) return manifest;
  const std::size_t end = manifest.find('"', at + key.size());
  return manifest.erase(at + key.size(), end - at - key.size());
}

TEST(ExportGolden, RtnHqqMiloExportsAreByteIdenticalToTheRecordedOnes) {
  const fs::path golden_file = moewb::test::sourceDir() / "tests/data/export-golden/hashes.json";
  const nlohmann::json golden = nlohmann::json::parse(readFile(golden_file));
  const fs::path root = moewb::test::makeTempDir("moewb-golden");
  for (const auto& [name, run] : golden.at("runs").items()) {
    SCOPED_TRACE(name);
    const fs::path out = root / name;
    std::string o, e;
    ASSERT_EQ(moewb::test::runCli(run.at("args").get<std::string>() + " --out '" + out.string() + "'", &o, &e), 0)
        << e;
    std::size_t files = 0;
    for (const auto& entry : fs::directory_iterator(out)) {
      const std::string file = entry.path().filename().string();
      std::string bytes = readFile(entry.path());
      if (file == "manifest.json") bytes = blankSource(bytes);
      ASSERT_TRUE(run.at("files").contains(file)) << "an export file the recorded run did not write: " << file;
      EXPECT_EQ(fingerprint(bytes), run.at("files").at(file).get<std::string>()) << file << " differs";
      ++files;
    }
    EXPECT_EQ(files, run.at("files").size()) << "files missing from the export";
  }
}

}  // namespace

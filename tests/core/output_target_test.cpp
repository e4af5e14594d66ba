// SPDX-License-Identifier: MIT
// The output rule (moewb/output_target.h, issue #39): an output never destroys a user's file or folder,
// the source it reads, or turns a file into a folder; full or unwritable places are found before the work.
#include "moewb/output_target.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "moewb/error.h"
#include "test_support.h"

namespace moewb::test {
namespace {

namespace fs = std::filesystem;

std::string errorOf(const OutputTarget& t) {
  try {
    checkOutputTarget(t);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

OutputTarget folderAt(const fs::path& p, bool force = false) {
  OutputTarget t;
  t.path = p;
  t.option = "quantize: --out";
  t.replace = force;
  return t;
}

TEST(OutputTarget, NewOrEmptyFolderIsWritten) {
  const fs::path dir = makeTempDir("moewb-out");
  EXPECT_EQ(errorOf(folderAt(dir / "new")), "");
  fs::create_directory(dir / "empty");
  EXPECT_EQ(errorOf(folderAt(dir / "empty")), "");
}

TEST(OutputTarget, NonEmptyFolderNeedsForceAndIsReplacedOnlyWhenAnExport) {
  const fs::path dir = makeTempDir("moewb-out") / "d";
  fs::create_directory(dir);
  std::ofstream(dir / "thesis.tex") << "x";
  const std::string plain = errorOf(folderAt(dir));
  EXPECT_NE(plain.find("--force"), std::string::npos) << plain;
  EXPECT_NE(plain.find("not empty"), std::string::npos) << plain;
  const std::string forced = errorOf(folderAt(dir, true));
  EXPECT_NE(forced.find("not a moewb export"), std::string::npos) << forced;

  std::ofstream(dir / "manifest.json") << R"({"format": "moewb-compressed", "tensors": {}})";
  EXPECT_TRUE(isMoewbExport(dir));
  EXPECT_EQ(errorOf(folderAt(dir, true)), "");
  EXPECT_NE(errorOf(folderAt(dir)), "") << "--force is still needed for an export";
}

TEST(OutputTarget, DequantizedExportIsRecognisedByItsIndex) {
  const fs::path dir = makeTempDir("moewb-out");
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"metadata": {"total_size": 4}, "weight_map": {}})";
  EXPECT_FALSE(isMoewbExport(dir)) << "a Hugging Face index alone is not a moewb export";
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"metadata": {"total_size": 4, "moewb_export": "dequantized"}, "weight_map": {}})";
  EXPECT_TRUE(isMoewbExport(dir));
}

TEST(OutputTarget, AFileIsNeverTurnedIntoAFolder) {
  const fs::path file = makeTempDir("moewb-out") / "notes.txt";
  std::ofstream(file) << "keep me";
  for (bool force : {false, true}) {
    const std::string e = errorOf(folderAt(file, force));
    EXPECT_NE(e.find("not a folder"), std::string::npos) << e;
  }
}

TEST(OutputTarget, TheSourceIsNeverReplacedEvenWithForce) {
  const fs::path root = makeTempDir("moewb-out");
  const fs::path src = root / "src";
  fs::create_directory(src);
  std::ofstream(src / "manifest.json") << R"({"format": "moewb-compressed"})";  // even an export as source
  std::ofstream(src / "model.safetensors") << "x";
  OutputTarget same = folderAt(src, true);
  same.inputs = {src, src / "model.safetensors"};
  EXPECT_NE(errorOf(same).find("this run reads"), std::string::npos) << errorOf(same);
  // Spelled differently (a trailing slash, a "..", a symbolic link): still the source.
  OutputTarget spelled = folderAt(root / "src" / ".." / "src" / "", true);
  spelled.inputs = same.inputs;
  EXPECT_NE(errorOf(spelled), "");
  fs::create_directory_symlink(src, root / "link");
  OutputTarget linked = folderAt(root / "link", true);
  linked.inputs = same.inputs;
  EXPECT_NE(errorOf(linked), "");
  // A folder holding the source is refused too (replacing it would delete the source).
  OutputTarget parent = folderAt(root, true);
  parent.inputs = same.inputs;
  EXPECT_NE(errorOf(parent).find("holds"), std::string::npos) << errorOf(parent);
}

TEST(OutputTarget, FileOutputsRefuseFoldersFifosAndExistingFilesWithoutForce) {
  const fs::path dir = makeTempDir("moewb-out");
  OutputTarget t;
  t.kind = OutputKind::File;
  t.option = "kv: --out";
  t.path = dir;
  EXPECT_NE(errorOf(t).find("is a folder"), std::string::npos) << errorOf(t);
  t.path = dir / "ids.txt";
  EXPECT_EQ(errorOf(t), "");
  std::ofstream(t.path) << "1\n2\n";
  EXPECT_NE(errorOf(t).find("--force"), std::string::npos) << errorOf(t);
  t.replace = true;
  EXPECT_EQ(errorOf(t), "");
  t.inputs = {t.path};
  EXPECT_NE(errorOf(t).find("this run reads"), std::string::npos) << errorOf(t);
  t.inputs.clear();
  t.path = dir / "fifo";
  ASSERT_EQ(::mkfifo(t.path.c_str(), 0600), 0);
  EXPECT_NE(errorOf(t).find("not a regular file"), std::string::npos) << errorOf(t);
}

TEST(OutputTarget, SymlinkLoopIsAMessage) {
  const fs::path dir = makeTempDir("moewb-out");
  fs::create_symlink(dir / "a", dir / "b");
  fs::create_symlink(dir / "b", dir / "a");
  const std::string e = errorOf(folderAt(dir / "a" / "out"));
  EXPECT_NE(e.find("--out"), std::string::npos) << e;
}

TEST(OutputTarget, SpaceAndWritabilityAreCheckedBeforeTheWork) {
  const fs::path dir = makeTempDir("moewb-out");
  EXPECT_GT(checkOutputSpace(folderAt(dir / "a" / "b"), 1000), 1000u);
  try {
    checkOutputSpace(folderAt(dir / "new"), uint64_t(1) << 62);
    FAIL() << "4.6 EB fit on this disk?";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("free"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "file") << "x";
  EXPECT_THROW(checkOutputSpace(folderAt(dir / "file" / "out"), 1), Error);
}

}  // namespace
}  // namespace moewb::test

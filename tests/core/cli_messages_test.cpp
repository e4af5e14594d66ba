// SPDX-License-Identifier: MIT
// Issue #39, item 5: inputs that ended in "internal error" (exit 2), a wrapped-around number or a message
// that said nothing are user errors now: exit code 1 (or CLI11's usage error), a short message naming the
// option or file, and no work done with a nonsense value.
#include <gtest/gtest.h>

#include <fstream>

#include "file_helpers.h"
#include "test_support.h"

namespace moewb::test {
namespace {

namespace fs = std::filesystem;

// A user error: not an internal error, not a crash, a message that names `what`.
void expectUserError(const std::string& args, const std::string& what) {
  SCOPED_TRACE(args);
  std::string out, err;
  const int rc = runCli(args, &out, &err);
  EXPECT_NE(rc, 0) << "accepted";
  EXPECT_NE(rc, 2) << err;
  EXPECT_LT(rc, 128) << "crashed: " << err;
  EXPECT_EQ(err.find("internal error"), std::string::npos) << err;
  EXPECT_NE(err.find(what), std::string::npos) << err;
  EXPECT_LT(err.size(), 600u) << "a message, not a wall of digits: " << err;
}

TEST(CliMessages, TwentyDigitTokenIdIsOutOfRange) {
  const fs::path ids = makeTempDir("moewb-msg") / "ids.txt";
  std::ofstream(ids) << "1 99999999999999999999 2\n";
  expectUserError("eval --seq-len 2 --ids " + quoted(ids), "99999999999999999999");
}

TEST(CliMessages, NpyWithANegativeShapeIsRefused) {
  const fs::path ids = makeTempDir("moewb-msg") / "ids.npy";
  const std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (-5,), }";
  std::ofstream f(ids, std::ios::binary);
  f << "\x93NUMPY" << char(1) << char(0) << char(header.size()) << char(0) << header << std::string(20, '\0');
  f.close();
  expectUserError("eval --seq-len 2 --ids " + quoted(ids), "-5");
}

TEST(CliMessages, HugeBudgetDoesNotWrapAround) {
  expectUserError(
      "quantize --method milo --budget 18000000000GB --only 'model.layers.0.self_attn.q_proj.weight'",
      "18000000000GB");
}

TEST(CliMessages, NegativeCountsAreRefusedBriefly) {
  expectUserError("eval --seq-len 16 --max-windows -1", "--max-windows");
  expectUserError("spectrum --tensor model.layers.0.self_attn.q_proj.weight --milo-rank -4", "--milo-rank");
  expectUserError("spectrum --tensor model.layers.0.self_attn.q_proj.weight --top -4", "--top");
}

TEST(CliMessages, NanTauIsRefused) {
  expectUserError("spectrum --tensor model.layers.0.self_attn.q_proj.weight --tau nan", "--tau");
}

TEST(CliMessages, SymbolicLinkLoopIsAMessage) {
  const fs::path dir = makeTempDir("moewb-msg");
  fs::create_directory(dir / "model");
  fs::create_symlink(dir / "model" / "model.safetensors", dir / "model" / "model.safetensors");
  expectUserError("inspect " + quoted(dir / "model"), "model.safetensors");
  fs::create_symlink(dir / "loop", dir / "loop");
  expectUserError("inspect " + quoted(dir / "loop"), "loop");
}

}  // namespace
}  // namespace moewb::test

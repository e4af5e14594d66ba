// SPDX-License-Identifier: MIT
// Ctrl-C (SIGINT) and SIGTERM stop long `moewb` commands promptly: exit code 130, "cancelled" on stderr and
// nothing on stdout (no half-printed answer). Each test starts the real CLI on a synthetic checkpoint large
// enough that the command is still working when the signal arrives.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "synthetic_model.h"
#include "file_helpers.h"
#include "test_support.h"

extern char** environ;

namespace moewb::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Interrupted {
  bool still_running_at_signal = false;
  int exit_code = -1;  // -1: did not exit by itself within the limit (killed)
  double seconds_to_exit = 0;
  std::string out, err;
};

// Runs `moewb args...`, sends `signal` after `delay`, and waits up to `limit` for it to exit.
Interrupted runAndSignal(const std::vector<std::string>& args, int signal, std::chrono::milliseconds delay,
                         std::chrono::seconds limit) {
  const fs::path dir = makeTempDir("moewb-interrupt");
  const std::string out = (dir / "out").string(), err = (dir / "err").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> argv_strings{MOEWB_CLI_PATH};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  Interrupted r;
  if (posix_spawn(&pid, MOEWB_CLI_PATH, &actions, nullptr, argv.data(), environ) != 0) {
    posix_spawn_file_actions_destroy(&actions);
    ADD_FAILURE() << "could not start " << MOEWB_CLI_PATH;
    return r;
  }
  posix_spawn_file_actions_destroy(&actions);
  std::this_thread::sleep_for(delay);
  int status = 0;
  r.still_running_at_signal = waitpid(pid, &status, WNOHANG) == 0;
  if (r.still_running_at_signal) {
    kill(pid, signal);
    const auto sent = Clock::now();
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (Clock::now() - sent > limit) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        status = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    r.seconds_to_exit = std::chrono::duration<double>(Clock::now() - sent).count();
  }
  r.exit_code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

void expectCancelled(const Interrupted& r, const char* what) {
  ASSERT_TRUE(r.still_running_at_signal) << what << " finished before the signal; make the model larger";
  EXPECT_EQ(r.exit_code, 130) << what << " did not stop within the limit (or not as cancelled): " << r.err;
  EXPECT_NE(r.err.find("cancelled"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << "half an answer on stdout: " << r.out.substr(0, 200);
}

// Guards: the singular values of a large matrix (a minute for 4096 x 4096) poll Ctrl-C.
TEST(CliInterrupt, SpectrumStopsOnCtrlCAndSigterm) {
  const fs::path model = makeTempDir("moewb-interrupt-spectrum") / "model";
  // 3072 x 3072: ~30 s of tridiagonal reduction on one core, far longer than the test waits.
  writeSyntheticModel(model, {{"model_type", "llama"}, {"hidden_size", 3072}, {"num_hidden_layers", 1}},
                      {{"model.layers.0.self_attn.q_proj.weight", {3072, 3072}}});
  for (int signal : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(signal == SIGINT ? "SIGINT" : "SIGTERM");
    const Interrupted r = runAndSignal(
        {"spectrum", model.string(), "--tensor", "model.layers.0.self_attn.q_proj.weight", "--json"}, signal,
        std::chrono::milliseconds(2500), std::chrono::seconds(5));
    expectCancelled(r, "spectrum");
  }
}

// Guards (issue #39): Ctrl-C during `eval --save-ids` says nothing was written, and writes no ids file.
TEST(CliInterrupt, EvalSaveIdsLeavesNoFileOnCtrlC) {
  const fs::path ids = makeTempDir("moewb-interrupt-eval") / "ids.txt";
  const std::string text = (sourceDir() / "resources/demo-text/sample.txt").string();
  const Interrupted r = runAndSignal({"eval", "--text", text, "--seq-len", "64", "--save-ids", ids.string()}, SIGINT,
                                     std::chrono::milliseconds(1500), std::chrono::seconds(10));
  expectCancelled(r, "eval");
  EXPECT_FALSE(fs::exists(ids)) << "the ids file of a cancelled evaluation";
}

// A Mixtral-shaped checkpoint of `layers` shards (one per layer) holding `experts` x 3 tiny tensors each,
// with its index: the shape of the largest MoE checkpoints' file listing (~100k tensors, hundreds of
// shards), written directly because only the headers matter.
void writeManyTensorCheckpoint(const fs::path& dir, int layers, int experts) {
  fs::create_directories(dir);
  nlohmann::json weight_map = nlohmann::json::object();
  for (int l = 0; l < layers; ++l) {
    const std::string shard = "model-" + std::to_string(l) + ".safetensors";
    nlohmann::json header = nlohmann::json::object();
    uint64_t offset = 0;
    for (int e = 0; e < experts; ++e)
      for (const char* w : {"w1", "w2", "w3"}) {
        const std::string name = "model.layers." + std::to_string(l) + ".block_sparse_moe.experts." +
                                 std::to_string(e) + "." + w + ".weight";
        header[name] = {{"dtype", "BF16"}, {"shape", {1, 1}}, {"data_offsets", {offset, offset + 2}}};
        offset += 2;
        weight_map[name] = shard;
      }
    const std::string text = header.dump();
    std::ofstream f(dir / shard, std::ios::binary);
    const uint64_t size = text.size();
    f.write(reinterpret_cast<const char*>(&size), sizeof size);  // little-endian length, as the format says
    f << text << std::string(offset, '\0');
  }
  std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"weight_map", weight_map}}.dump();
  std::ofstream(dir / "config.json") << nlohmann::json{
      {"model_type", "mixtral"},
      {"hidden_size", 1},
      {"num_hidden_layers", layers},
      {"num_local_experts", experts},
      {"num_experts_per_tok", 2}}.dump();
}

// Guards: opening and classifying a checkpoint of very many tensors (the largest MoE checkpoints have
// ~100k in hundreds of shards) and building its listing poll Ctrl-C.
TEST(CliInterrupt, InspectStopsOnCtrlC) {
  const fs::path model = makeTempDir("moewb-interrupt-inspect") / "model";
  writeManyTensorCheckpoint(model, 64, 1024);
  const auto started = Clock::now();
  std::string out, err;
  ASSERT_EQ(runCli("inspect '" + model.string() + "' --json", &out, &err), 0) << err;
  const double whole = std::chrono::duration<double>(Clock::now() - started).count();
  // Signal at a third of the time the whole command takes here; exit 130 says it stopped before the end.
  const auto delay = std::chrono::milliseconds(static_cast<int>(whole * 1000 / 3));
  const Interrupted r =
      runAndSignal({"inspect", model.string(), "--json"}, SIGINT, delay, std::chrono::seconds(5));
  expectCancelled(r, "inspect");
}

}  // namespace
}  // namespace moewb::test

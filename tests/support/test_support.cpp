// SPDX-License-Identifier: MIT
#include "test_support.h"

#include "file_helpers.h"

#include <array>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <sys/wait.h>
#include <vector>

namespace moewb::test {

std::filesystem::path sharedDir() {
  if (const char* env = std::getenv("MOEWB_SHARED_DIR"); env && *env) return env;
  std::filesystem::path p = MOEWB_SHARED_DIR;
  return std::filesystem::exists(p) ? p : std::filesystem::path{};
}

std::filesystem::path sourceDir() { return MOEWB_SOURCE_DIR; }
std::filesystem::path demoModelDir() { return sourceDir() / "resources" / "demo-model"; }

namespace {
std::vector<std::filesystem::path>& tempDirs() {
  static std::vector<std::filesystem::path> dirs;
  return dirs;
}
void removeTempDirs() {
  std::error_code ec;
  for (const auto& d : tempDirs()) std::filesystem::remove_all(d, ec);
}
}  // namespace

std::filesystem::path makeTempDir(const std::string& prefix) {
  static const bool registered = [] { return std::atexit(removeTempDirs) == 0; }();
  (void)registered;
  std::random_device rd;
  auto dir = std::filesystem::temp_directory_path() /
             (prefix + "-" + std::to_string(rd()) + "-" + std::to_string(rd()));
  std::filesystem::create_directories(dir);
  tempDirs().push_back(dir);
  return dir;
}

int runCli(const std::string& args, std::string* out, std::string* err) {
  auto dir = makeTempDir("moewb-cli");
  std::string cmd = std::string("'") + MOEWB_CLI_PATH + "' " + args + " >'" + (dir / "out").string() +
                    "' 2>'" + (dir / "err").string() + "' </dev/null";
  int status = std::system(cmd.c_str());
  if (out) *out = slurp(dir / "out");
  if (err) *err = slurp(dir / "err");
  std::filesystem::remove_all(dir);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace moewb::test

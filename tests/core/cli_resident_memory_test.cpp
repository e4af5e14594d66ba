// SPDX-License-Identifier: MIT
// Issue #39, item 7: commands that do no GPU work stay small. Every command used to load cuBLAS and
// cuSOLVER before main() (267 MB resident for `moewb --version`); they are now opened by the first GPU call
// (gpu/src/lazy_cuda_libraries.cpp). The peak resident size of the child is read from wait4()'s rusage, so
// a library mapped and touched at start-up counts even if the process is short-lived. A build without CUDA
// runs the same checks.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "test_support.h"

namespace moewb::test {
namespace {

constexpr long kLimitKiB = 50 * 1024;

// Peak resident set of `moewb args...` in KiB (stdout and stderr discarded); fails the test on a bad exit.
long peakResidentKiB(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string cli = MOEWB_CLI_PATH;
  argv.push_back(cli.data());
  std::vector<std::string> copies = args;
  for (auto& a : copies) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!::freopen("/dev/null", "w", stdout) || !::freopen("/dev/null", "w", stderr)) ::_exit(126);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  EXPECT_EQ(::wait4(pid, &status, 0, &usage), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "moewb exited with status " << status;
  return usage.ru_maxrss;  // KiB on Linux
}

TEST(CliResidentMemory, VersionStaysUnder50MB) {
  const long kib = peakResidentKiB({"--version"});
  RecordProperty("peak_rss_kib", std::to_string(kib));
  EXPECT_LT(kib, kLimitKiB) << "moewb --version peaked at " << kib / 1024 << " MB";
}

TEST(CliResidentMemory, InspectOfTheDemoModelStaysUnder50MB) {
  const long kib = peakResidentKiB({"inspect", demoModelDir().string()});
  RecordProperty("peak_rss_kib", std::to_string(kib));
  EXPECT_LT(kib, kLimitKiB) << "moewb inspect " << demoModelDir() << " peaked at " << kib / 1024 << " MB";
}

}  // namespace
}  // namespace moewb::test

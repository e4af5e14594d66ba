// SPDX-License-Identifier: MIT
// Issue #39, item 7: commands that do no GPU work stay small. Every command used to load cuBLAS and
// cuSOLVER before main() (267 MB resident for `moewb --version`); they are now opened by the first GPU call
// (gpu/src/lazy_cuda_libraries.cpp). The child's own peak resident size (VmHWM) is read as it exits, so a
// library mapped and touched at start-up counts even though the process is short-lived. A build without CUDA
// runs the same checks.
#include <gtest/gtest.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "test_support.h"

namespace moewb::test {
namespace {

constexpr long kLimitKiB = 50 * 1024;

// VmHWM (KiB) of /proc/PID/status, or -1.
long highWaterKiB(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// Peak resident set of `moewb args...` in KiB (stdout and stderr discarded). Not wait4()'s ru_maxrss: the
// child forked from this test process starts with the test's own resident pages and exec() keeps that
// high-water mark. The child is traced instead and stopped as it exits, when its VmHWM is its own.
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
    ::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
    ::raise(SIGSTOP);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);  // stopped before exec
  if (!WIFSTOPPED(status) || ::ptrace(PTRACE_SETOPTIONS, pid, nullptr, PTRACE_O_TRACEEXIT) != 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return -1;
  }
  long peak = -1;
  ::ptrace(PTRACE_CONT, pid, nullptr, nullptr);
  while (::waitpid(pid, &status, 0) == pid && WIFSTOPPED(status)) {
    const bool exiting = (status >> 8) == (SIGTRAP | (PTRACE_EVENT_EXIT << 8));
    if (exiting) peak = highWaterKiB(pid);
    // Pass on real signals; swallow the exec and exit traps.
    const int sig = WSTOPSIG(status) == SIGTRAP ? 0 : WSTOPSIG(status);
    ::ptrace(PTRACE_CONT, pid, nullptr, reinterpret_cast<void*>(intptr_t(sig)));
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "moewb exited with status " << status;
  return peak;
}

TEST(CliResidentMemory, VersionStaysUnder50MB) {
  const long kib = peakResidentKiB({"--version"});
  if (kib < 0) GTEST_SKIP() << "cannot trace a child process here (ptrace refused)";
  RecordProperty("peak_rss_kib", std::to_string(kib));
  EXPECT_LT(kib, kLimitKiB) << "moewb --version peaked at " << kib / 1024 << " MB";
}

TEST(CliResidentMemory, InspectOfTheDemoModelStaysUnder50MB) {
  const long kib = peakResidentKiB({"inspect", demoModelDir().string()});
  if (kib < 0) GTEST_SKIP() << "cannot trace a child process here (ptrace refused)";
  RecordProperty("peak_rss_kib", std::to_string(kib));
  EXPECT_LT(kib, kLimitKiB) << "moewb inspect " << demoModelDir() << " peaked at " << kib / 1024 << " MB";
}

}  // namespace
}  // namespace moewb::test

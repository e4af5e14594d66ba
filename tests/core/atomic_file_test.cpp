// SPDX-License-Identifier: MIT
// Issue #39, item 6 (leftovers): staging folders and temporary files of a run that was killed (SIGKILL,
// power loss) are removed by the next run that writes to the same place; a running writer's are kept.
#include "moewb/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "test_support.h"

namespace moewb::test {
namespace {

namespace fs = std::filesystem;

// The id of a process that has exited (a child reaped at once; ids are not reused that fast).
pid_t deadProcessId() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

fs::path makeLeftover(const fs::path& dir, const std::string& name, bool folder) {
  const fs::path p = dir / name;
  if (folder) {
    fs::create_directory(p);
    std::ofstream(p / "model.safetensors") << "half-written";
  } else {
    std::ofstream(p) << "half-written";
  }
  return p;
}

TEST(AtomicFile, StagingRemovesStalePartialFoldersOfKilledRuns) {
  const fs::path dir = makeTempDir("moewb-stale");
  const std::string dead = std::to_string(deadProcessId()), alive = std::to_string(getpid());
  const fs::path stale = makeLeftover(dir, ".export.partial-" + dead + "-17", true);
  const fs::path stale_old = makeLeftover(dir, ".export.old-" + dead + "-18", true);
  // Written before staging names carried the writer's process id: one random number.
  const fs::path legacy = makeLeftover(dir, ".export.partial-987654321", true);
  const fs::path running = makeLeftover(dir, ".export.partial-" + alive + "-19", true);
  const fs::path other = makeLeftover(dir, ".other.partial-" + dead + "-20", true);
  {
    StagingDirectory staging(dir / "export");
    std::ofstream(staging.path() / "manifest.json") << "{}";
    staging.commit();
  }
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(stale_old));
  EXPECT_FALSE(fs::exists(legacy));
  EXPECT_TRUE(fs::exists(running)) << "a running writer's staging folder";
  EXPECT_TRUE(fs::exists(other)) << "another output's leftovers are its own run's to clean";
  EXPECT_TRUE(fs::exists(dir / "export" / "manifest.json"));
}

TEST(AtomicFile, WritingAFileRemovesStaleTemporaryFiles) {
  const fs::path dir = makeTempDir("moewb-stale");
  const fs::path stale = makeLeftover(dir, ".ids.txt.tmp-" + std::to_string(deadProcessId()) + "-3", false);
  const fs::path running = makeLeftover(dir, ".ids.txt.tmp-" + std::to_string(getpid()) + "-4", false);
  writeFileAtomically(dir / "ids.txt", "1\n2\n");
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(running));
}

}  // namespace
}  // namespace moewb::test

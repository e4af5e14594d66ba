// SPDX-License-Identifier: MIT
#pragma once
// Small file helpers the CLI tests share: a file's whole content, and a path quoted for runCli's shell.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace moewb::test {

// The whole file as bytes ("" when it cannot be opened).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The path in single quotes, for a command line runCli passes to the shell.
inline std::string quoted(const std::filesystem::path& p) {
  return "'" + p.string() + "'";
}

}  // namespace moewb::test

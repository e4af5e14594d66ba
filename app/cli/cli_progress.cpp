// SPDX-License-Identifier: MIT
#include "cli_progress.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <algorithm>
#include <csignal>
#include <memory>
#include <cstdio>
#include <string>

namespace moewb::cli {
namespace {
std::atomic<bool> g_interrupted{false};
void onSignal(int) { g_interrupted.store(true); }
}  // namespace

bool interrupted() { return g_interrupted.load(); }

void throwIfInterrupted() {
  if (interrupted()) throw Cancelled{};
}

ProgressFn interruptCheck() {
  return [](double, std::string_view) { return !g_interrupted.load(); };
}

void installInterruptHandler() {
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

ProgressFn makeCliProgress(std::string what) {
  const bool tty = isatty(STDERR_FILENO);
  struct State {
    int last_decile = -1;
    double shown = 0;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point last_draw{};
  };
  auto state = std::make_shared<State>();
  return [what = std::move(what), tty, state](double fraction, std::string_view stage) {
    if (g_interrupted.load()) return false;
    // Parallel workers report estimates that can arrive out of order; show only forward progress.
    fraction = std::max(fraction, state->shown);
    state->shown = fraction;
    if (tty) {
      auto now = std::chrono::steady_clock::now();
      if (fraction < 1.0 && now - state->last_draw < std::chrono::milliseconds(100)) return true;
      state->last_draw = now;
      int filled = static_cast<int>(fraction * 30);
      std::string bar(filled, '#');
      bar.resize(30, '.');
      std::string stage_s(stage.substr(0, 60));
      std::fprintf(stderr, "\r%s [%s] %5.1f%% %-60s", what.c_str(), bar.c_str(), 100.0 * fraction, stage_s.c_str());
      if (fraction >= 1.0) std::fprintf(stderr, "\n");
    } else {
      // Logs (CI, pipes) only hear about work that takes a while, once per 10%.
      if (std::chrono::steady_clock::now() - state->start < std::chrono::seconds(2)) return true;
      int decile = static_cast<int>(fraction * 10);
      if (decile != state->last_decile) {
        state->last_decile = decile;
        std::fprintf(stderr, "%s: %3d%%\n", what.c_str(), decile * 10);
      }
    }
    return true;
  };
}

}  // namespace moewb::cli

// SPDX-License-Identifier: MIT
#pragma once
#include <string>

#include "moewb/progress.h"

namespace moewb::cli {

// A progress callback for long commands: draws a one-line bar on stderr (only when stderr is a
// terminal, or every 10% otherwise) and returns false once Ctrl-C was pressed, so core work stops cleanly.
ProgressFn makeCliProgress(std::string what);
// A silent callback for short steps that still must stop on Ctrl-C (opening and classifying a checkpoint):
// returns false once SIGINT/SIGTERM arrived, draws nothing.
ProgressFn interruptCheck();
// True once SIGINT/SIGTERM arrived (main installs the handler).
bool interrupted();
// Throws moewb::Cancelled once SIGINT/SIGTERM arrived: for the command's own loops.
void throwIfInterrupted();
void installInterruptHandler();

}  // namespace moewb::cli

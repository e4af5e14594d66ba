// SPDX-License-Identifier: MIT
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "moewb/catalog.h"

namespace moewb::cli {

// Adds the optional positional MODEL argument every model command takes (same help text everywhere).
CLI::Option* addModelArgument(CLI::App& cmd, std::string& model);

// Opens MODEL (or the demo model when empty) and classifies it: the first step of most commands. Ctrl-C
// stops it (moewb::Cancelled), which matters for checkpoints of ~100k tensors.
std::shared_ptr<ModelCatalog> openModel(const std::string& model_arg);

// "12.3 MB", "1.2 GB": sizes as users read them (decimal units, as Hugging Face shows them).
std::string humanBytes(double bytes);
// "15.5M", "46.7B"
std::string humanCount(double count);

}  // namespace moewb::cli

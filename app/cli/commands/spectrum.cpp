// SPDX-License-Identifier: MIT
// `moewb spectrum [MODEL] --tensor NAME [--tau T] [--json]`: singular values of one matrix's quantization
// residual W - dequant(quant(W)), cumulative energy, residual rank at tau, error versus compensator rank
// and (with --milo-rank) MiLo's convergence curve.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_progress.h"
#include "command_registry.h"
#include "model_loading.h"
#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/demo_model.h"
#include "moewb/error.h"
#include "moewb/jobs/spectrum_job.h"

namespace moewb::cli {
namespace {

struct SpectrumArgs {
  std::string model;
  std::string tensor;
  double tau = 0.5;
  std::string method = "hqq";
  int bits = 3;
  int group = 64;
  std::string ranks = "0,4,8,16,32,64,128";
  int milo_rank = 0;
  int top = 16;
  bool json = false;
};

std::vector<int> parseRankList(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      out.push_back(std::stoi(item));
    } catch (const std::exception&) {
      throw Error(fmt::format("spectrum: --ranks '{}' is not a comma-separated list of integers", text));
    }
  }
  return out;
}

void runSpectrum(const SpectrumArgs& a) {
  const std::string path = resolveModelPath(a.model);
  // The request the GUI's tensor inspector builds too (core/include/moewb/jobs/spectrum_job.h).
  jobs::SpectrumRequest request;
  request.catalog =
      std::make_shared<const ModelCatalog>(Checkpoint::open(path, interruptCheck()), interruptCheck());
  request.tensor = a.tensor;
  request.method = a.method;
  request.bits = a.bits;
  request.group = a.group;
  request.ranks = parseRankList(a.ranks);
  request.tau = a.tau;
  request.milo_rank = a.milo_rank;
  request.milo_full_curve = true;  // the whole curve, not MiLo's stop rule
  // Ctrl-C stops the long parts (the singular values of a large matrix take a minute) by Cancelled.
  const jobs::SpectrumJobResult r = jobs::runSpectrumJob(request, makeCliProgress("spectrum"));
  const quant::ResidualSpectrum& spec = r.spectrum;
  const std::vector<int>& ranks = r.ranks;
  const std::vector<double>& err = r.error_at_rank;
  const std::vector<double>& curve = r.milo_curve;
  if (a.json) {
    nlohmann::json j = {{"model", path},
                        {"tensor", a.tensor},
                        {"rows", r.rows},
                        {"cols", r.cols},
                        {"method", a.method},
                        {"bits", a.bits},
                        {"group", a.group},
                        {"tau", a.tau},
                        {"rank_at_tau", r.rank_at_tau},
                        {"quant_rel_error", r.quant_rel_error},
                        {"singular_values", spec.sigma},
                        {"cumulative_energy", spec.cumulative_energy},
                        {"error_vs_rank", nlohmann::json::array()},
                        {"milo_curve", curve}};
    for (std::size_t i = 0; i < ranks.size(); ++i)
      j["error_vs_rank"].push_back({{"rank", ranks[i]}, {"rel_error", err[i]}});
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s [%lld x %lld], %s %d-bit g%d: relative error %.6f\n", a.tensor.c_str(),
              static_cast<long long>(r.rows), static_cast<long long>(r.cols), a.method.c_str(), a.bits,
              a.group, r.quant_rel_error);
  std::printf("residual rank at tau=%.3g: %d of %zu singular values\n", a.tau, r.rank_at_tau,
              spec.sigma.size());
  std::printf("%6s %14s %10s\n", "i", "sigma", "energy");
  for (int i = 0; i < std::min<int>(a.top, int(spec.sigma.size())); ++i)
    std::printf("%6d %14.6g %10.4f\n", i + 1, spec.sigma[std::size_t(i)],
                spec.cumulative_energy[std::size_t(i)]);
  std::printf("\nerror after adding the best rank-r part of the residual:\n");
  for (std::size_t i = 0; i < ranks.size(); ++i) std::printf("  r=%-5d %.6f\n", ranks[i], err[i]);
  if (!curve.empty()) {
    std::printf("\nMiLo rank %d convergence:\n", a.milo_rank);
    for (std::size_t t = 0; t < curve.size(); ++t) std::printf("  %2zu %.6f\n", t + 1, curve[t]);
  }
}

const CommandRegistrar registrar("spectrum", [](CLI::App& root) {
  auto a = std::make_shared<SpectrumArgs>();
  auto* cmd = root.add_subcommand("spectrum", "Singular values of a matrix's quantization residual");
  addModelArgument(*cmd, a->model);
  cmd->add_option("--tensor", a->tensor, "Weight matrix name (expert slices: NAME[e])")->required();
  cmd->add_option("--tau", a->tau, "Threshold of the residual rank (sigma_i >= tau * sigma_max)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--method", a->method, "Quantizer of the residual: rtn or hqq");
  cmd->add_option("--bits", a->bits, "Bits: 2, 3, 4 or 8")->check(CLI::IsMember({2, 3, 4, 8}));
  cmd->add_option("--group", a->group, "Group size")->check(CLI::Range(1, 65536));
  cmd->add_option("--ranks", a->ranks, "Ranks of the error-versus-rank curve (comma-separated)");
  cmd->add_option("--milo-rank", a->milo_rank, "Also run MiLo at this rank and print its convergence curve")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--top", a->top, "Singular values to print (text output)")->check(CLI::Range(0, 1 << 30));
  cmd->add_flag("--json", a->json, "Print JSON (all singular values)");
  cmd->callback([a] { runSpectrum(*a); });
});

}  // namespace
}  // namespace moewb::cli

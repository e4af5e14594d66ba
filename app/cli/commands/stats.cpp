// SPDX-License-Identifier: MIT
// `moewb stats [MODEL] [--filter EXPR] [--json|--csv] [--bins N] [--no-cache]`: per-matrix / per-expert
// distribution statistics (the table the GUI shows), from the cache when the model was seen before.
#include "moewb/stats.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_progress.h"
#include "command_registry.h"
#include "model_loading.h"
#include "moewb/tensor_filter.h"

namespace moewb::cli {
namespace {

struct StatsArgs {
  std::string model;
  std::string filter;
  bool json = false;
  bool csv = false;
  bool channels = false;
  bool no_cache = false;
  bool matrices_only = false;
  int bins = 64;
};

std::string shapeText(const StatsRow& row) {
  return fmt::format("{}x{}", row.rows, row.cols);
}
std::string layerText(int layer) {
  return layer >= 0 ? std::to_string(layer) : "-";
}

void printTable(const std::vector<const StatsRow*>& rows, const std::vector<RowFields>& fields) {
  std::size_t name_width = 4;
  for (const auto& f : fields) name_width = std::max(name_width, f.name.size());
  name_width = std::min<std::size_t>(name_width, 64);
  // "nan/inf": the NaN and ±Inf values, which every other column leaves out (a silent gap otherwise).
  fmt::print("{:<{}} {:>5} {:<13} {:<8} {:>6} {:>11} {:<7} {:>10} {:>9} {:>9} {:>9} {:>7} {:>8} {:>8} {:>7}\n",
             "name", name_width, "layer", "block", "proj", "expert", "shape", "dtype", "mean", "std",
             "absmax", "kurtosis", "skew", ">3σ", ">6σ", "nan/inf");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const StatsRow& r = *rows[i];
    const RowFields& f = fields[i];
    const TensorStats& s = r.stats;
    std::string name =
        f.name.size() > name_width ? "…" + f.name.substr(f.name.size() - name_width + 1) : f.name;
    fmt::print(
        "{:<{}} {:>5} {:<13} {:<8} {:>6} {:>11} {:<7} {:>10.3e} {:>9.3e} {:>9.3e} {:>9.3f} {:>7.3f} "
        "{:>7.3f}% {:>7.4f}% {:>7}\n",
        name, name_width, layerText(f.layer), f.block, f.proj == "none" ? "-" : f.proj, layerText(f.expert),
        shapeText(r), f.dtype, s.mean, s.std, s.absmax, s.kurtosis, s.skewness, 100.0 * s.frac_gt3sigma,
        100.0 * s.frac_gt6sigma, s.nonfinite);
  }
}

// NaN/Inf weights are a finding of their own: one line on stderr naming the rows that hold them, whatever
// the output format (the table's column and JSON/CSV "nonfinite" give the counts).
void reportNonFinite(const std::vector<const StatsRow*>& rows, const std::vector<RowFields>& fields) {
  std::vector<std::string> names;
  int64_t values = 0;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i]->stats.nonfinite > 0) {
      names.push_back(fields[i].name);
      values += rows[i]->stats.nonfinite;
    }
  if (names.empty()) return;
  std::string listed;
  for (std::size_t i = 0; i < names.size() && i < 16; ++i) listed += (i ? ", " : "") + names[i];
  if (names.size() > 16) listed += fmt::format(", ... ({} more)", names.size() - 16);
  std::fprintf(stderr, "moewb: %zu tensor%s hold %lld NaN/Inf value%s (left out of the other statistics): %s\n",
               names.size(), names.size() == 1 ? "" : "s", static_cast<long long>(values), values == 1 ? "" : "s",
               listed.c_str());
}

nlohmann::json rowJson(const StatsRow& r, const RowFields& f, bool channels) {
  nlohmann::json j = {{"name", f.name},
                      {"layer", f.layer >= 0 ? nlohmann::json(f.layer) : nlohmann::json(nullptr)},
                      {"block", f.block},
                      {"proj", f.proj == "none" ? nlohmann::json(nullptr) : nlohmann::json(f.proj)},
                      {"expert", f.expert >= 0 ? nlohmann::json(f.expert) : nlohmann::json(nullptr)},
                      {"shape", {r.rows, r.cols}},
                      {"dtype", f.dtype},
                      {"matrix", r.matrix >= 0 ? nlohmann::json(r.matrix) : nlohmann::json(nullptr)}};
  j["stats"] = statsToJson(r.stats, false);
  j["stats"]["histogram"] = r.stats.histogram;
  if (channels) j["stats"]["channel_absmax"] = r.stats.channel_absmax;
  return j;
}

std::string csvQuote(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void printCsv(const std::vector<const StatsRow*>& rows, const std::vector<RowFields>& fields) {
  fmt::print(
      "name,layer,block,proj,expert,rows,cols,dtype,count,nonfinite,mean,std,min,max,absmax,kurtosis,"
      "skewness,frac_gt3sigma,frac_gt6sigma,frobenius\n");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const StatsRow& r = *rows[i];
    const RowFields& f = fields[i];
    const TensorStats& s = r.stats;
    fmt::print(
        "{},{},{},{},{},{},{},{},{},{},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g}"
        "\n",
        csvQuote(f.name), f.layer >= 0 ? std::to_string(f.layer) : "", f.block,
        f.proj == "none" ? "" : f.proj, f.expert >= 0 ? std::to_string(f.expert) : "", r.rows, r.cols,
        f.dtype, s.count, s.nonfinite, s.mean, s.std, s.min, s.max, s.absmax, s.kurtosis, s.skewness,
        s.frac_gt3sigma, s.frac_gt6sigma, s.frobenius);
  }
}

void runStats(const StatsArgs& args) {
  // Parse the filter first: a typo should fail at once, not after minutes of statistics.
  const TensorFilter filter = TensorFilter::parse(args.filter);
  auto catalog = openModel(args.model);
  StatsOptions options;
  options.histogram_bins = args.bins;
  options.include_other_tensors = !args.matrices_only;
  // A filter on catalog fields alone (`layer:3`) needs only the rows it selects: when they are not
  // cached, read just those (a partial result, not cached). Statistics terms need every row.
  auto selector = [&](const StatsRow& row) {
    RowFields f = makeRowFields(*catalog, row);
    f.stats = nullptr;
    return filter.matches(f);
  };
  const bool cached =
      !args.no_cache && std::filesystem::exists(statsCachePath(catalog->checkpoint().identity(), options));
  const bool partial = !cached && !filter.empty() && !filter.usesStats();
  const ModelStats stats =
      partial ? computeSelectedModelStats(*catalog, selector, options, makeCliProgress("statistics"))
              : loadOrComputeModelStats(*catalog, options, makeCliProgress("statistics"), !args.no_cache);

  std::vector<const StatsRow*> rows;
  std::vector<RowFields> fields;
  for (const auto& row : stats.rows) {
    RowFields f = makeRowFields(*catalog, row);
    if (!filter.matches(f)) continue;
    rows.push_back(&row);
    fields.push_back(std::move(f));
  }

  reportNonFinite(rows, fields);
  if (args.json) {
    nlohmann::json j = {
        {"model", catalog->checkpoint().root()}, {"filter", args.filter},    {"bins", args.bins},
        {"from_cache", stats.from_cache},        {"seconds", stats.seconds}, {"bytes", stats.bytes},
        {"total_rows", stats.rows.size()},       {"partial", partial}};
    auto& out = j["rows"] = nlohmann::json::array();
    for (std::size_t i = 0; i < rows.size(); ++i) out.push_back(rowJson(*rows[i], fields[i], args.channels));
    fmt::print("{}\n", j.dump(2));
  } else if (args.csv) {
    printCsv(rows, fields);
  } else {
    printTable(rows, fields);
    const std::string source =
        stats.from_cache
            ? std::string("read from the cache")
            : fmt::format("computed over {} in {:.2f} s ({:.2f} GB/s)", humanBytes(double(stats.bytes)),
                          stats.seconds, double(stats.bytes) / 1e9 / std::max(stats.seconds, 1e-9));
    if (partial)
      fmt::print(
          "\n{} rows match '{}'; statistics of these rows {} (run without --filter once to cache all)\n",
          rows.size(), args.filter, source);
    else
      fmt::print("\n{} of {} rows{}; statistics {}\n", rows.size(), stats.rows.size(),
                 args.filter.empty() ? "" : fmt::format(" match '{}'", args.filter), source);
  }
}

const CommandRegistrar registrar("stats", [](CLI::App& root) {
  auto args = std::make_shared<StatsArgs>();
  auto* cmd = root.add_subcommand("stats",
                                  "Per-matrix and per-expert weight statistics (mean, std, abs-max, "
                                  "kurtosis, skewness, outlier fractions) as a table, JSON or CSV");
  addModelArgument(*cmd, args->model);
  cmd->add_option("--filter,-f", args->filter,
                  "Only rows matching EXPR, e.g. 'layer:0-1 block:expert proj:down kurtosis>1' "
                  "(docs/filter-syntax.md)");
  auto* json = cmd->add_flag("--json", args->json, "Print one JSON object with a 'rows' array");
  auto* csv = cmd->add_flag("--csv", args->csv, "Print CSV with every scalar statistic");
  json->excludes(csv);
  cmd->add_option("--bins", args->bins, "Histogram bins")->check(CLI::Range(1, 100000));
  cmd->add_flag("--channels", args->channels, "Include per-output-channel abs-max arrays in --json output");
  cmd->add_flag("--no-cache", args->no_cache,
                "Recompute even when cached statistics exist (and do not store them)");
  cmd->add_flag("--matrices-only", args->matrices_only,
                "Only weight matrices (no norms, biases or other tensors)");
  cmd->callback([args] { runStats(*args); });
});

}  // namespace
}  // namespace moewb::cli

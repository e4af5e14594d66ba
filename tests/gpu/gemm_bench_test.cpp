// SPDX-License-Identifier: MIT
// `moewb bench gemm`'s reports (gpu::gemmReportMarkdown / gemmReportJson) with shape labels, as
// `--model` gives them, one benchmark run of a model shape on the GPU, and how the GPU benchmarks stop when
// their progress callback says so (Ctrl-C in `moewb bench gemm|quantize`, Cancel in the GUI).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gpu_test_support.h"
#include "moewb/gpu/bench.h"

namespace {

using namespace moewb::gpu;

GemmBenchRow rowWithLabel(std::string label) {
  GemmBenchRow r;
  r.n = 256;
  r.k = 512;
  r.m = 1;
  r.ctas = 2;
  r.correct = true;
  r.label = std::move(label);
  return r;
}

// A table row's cells: the '|' not preceded by a backslash.
int markdownCells(const std::string& line) {
  int cells = -1;
  for (std::size_t i = 0; i < line.size(); ++i)
    if (line[i] == '|' && (i == 0 || line[i - 1] != '\\')) ++cells;
  return cells;
}

TEST(GemmBenchReport, LabelsSurviveJsonAndMarkdownWhateverTheirCharacters) {
  GemmBenchReport rep;
  rep.device.name = "GPU \"x\"";
  const std::string odd = "expert \"down\" \u00D732 | w2\\x\n";
  rep.rows = {rowWithLabel(odd), rowWithLabel("")};
  const auto j = nlohmann::json::parse(gemmReportJson(rep));  // throws if the escaping is wrong
  EXPECT_EQ(j.at("device"), rep.device.name);
  EXPECT_EQ(j.at("rows")[0].at("label"), odd);
  EXPECT_FALSE(j.at("rows")[1].contains("label"));

  std::istringstream md(gemmReportMarkdown(rep));
  std::vector<std::string> table;
  for (std::string line; std::getline(md, line);)
    if (!line.empty() && line[0] == '|') table.push_back(line);
  ASSERT_EQ(table.size(), 4u) << "header, rule, two rows: the label's newline must not split its row";
  EXPECT_NE(table[0].find("tensors"), std::string::npos) << table[0];
  for (const auto& line : table) EXPECT_EQ(markdownCells(line), markdownCells(table[0])) << line;

  rep.rows = {rowWithLabel("")};
  EXPECT_EQ(gemmReportMarkdown(rep).find("tensors"), std::string::npos) << "no column without labels";
}

// The cells of a table row, trimmed (labels without '|' only).
std::vector<std::string> cellsOf(const std::string& line) {
  std::vector<std::string> cells;
  std::istringstream in(line.substr(1));
  for (std::string cell; std::getline(in, cell, '|');) {
    const auto a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
    cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
  }
  return cells;
}

TEST(GemmBenchReport, WhatDidNotRunReadsAsADashNotAsZero) {
  GemmBenchReport rep;
  GemmBenchRow plain = rowWithLabel("");  // --rank 0, baselines off: only the W3A16 call ran
  plain.w3a16_us = 9.5;
  plain.rel_err_cpu = 4e-4;
  GemmBenchRow full = plain;  // compensator and baselines too
  full.w3a16_comp_us = 11.5;
  full.comp_overhead_pct = 21.0;
  full.rel_err_comp_cpu = 3e-4;
  full.cublas_us = 43.0;
  full.dequant_cublas_us = 227.0;
  full.speedup_vs_cublas = 43.0 / 9.5;
  full.speedup_vs_dequant = 227.0 / 9.5;
  full.rel_err_vs_cublas = 2e-4;
  rep.rows = {plain, full};
  std::istringstream md(gemmReportMarkdown(rep));
  std::vector<std::vector<std::string>> table;
  for (std::string line; std::getline(md, line);)
    if (!line.empty() && line[0] == '|') table.push_back(cellsOf(line));
  ASSERT_EQ(table.size(), 4u);
  const auto& header = table[0];
  auto column = [&](const std::string& name) {
    const auto at = std::find(header.begin(), header.end(), name);
    EXPECT_NE(at, header.end()) << name;
    return std::size_t(at - header.begin());
  };
  const std::string dash = "\u2014";
  for (const char* name : {"+comp us (ovh %)", "cuBLAS fp16 us", "deq+cuBLAS us", "speedup vs cuBLAS",
                           "vs deq+cuBLAS", "err comp", "err vs cuBLAS"}) {
    EXPECT_EQ(table[2].at(column(name)), dash) << name << " of a row where it did not run";
    EXPECT_NE(table[3].at(column(name)), dash) << name << " of a row where it ran";
  }
  EXPECT_EQ(table[3].at(column("+comp us (ovh %)")), "11.50 (+21.0)");
  EXPECT_EQ(table[2].at(column("W3A16 us")), "9.50");
  EXPECT_EQ(table[2].at(column("CTAs")), "2");
  EXPECT_EQ(table[2].at(column("err vs CPU")), "4.0e-04");
}

TEST(GemmBenchReport, ModelShapeRunsWithItsLabel) {
  REQUIRE_GPU();
  GemmBenchOptions o;
  o.shapes = {{256, 512}, {128, 256}};
  o.shape_labels = {"expert down \u00D732", "attention k \u00D74"};
  o.batches = {1, 16};
  o.replays = 20;
  o.baselines = false;
  o.compensator_rank = 0;
  GemmBenchReport rep;
  const Status s = runGemmBenchmark(o, &rep);
  ASSERT_TRUE(s.ok()) << s.message;
  ASSERT_EQ(rep.rows.size(), 4u);
  for (const auto& r : rep.rows) {
    EXPECT_TRUE(r.correct) << r.n << "x" << r.k << " m=" << r.m << " err " << r.rel_err_cpu;
    EXPECT_GT(r.w3a16_us, 0.0);
    EXPECT_GT(r.w3a16_graph_us, 0.0);
    EXPECT_GE(r.graph_calls, 20) << "at least 20 calls per timed graph";
    EXPECT_EQ(r.label, r.n == 256 ? o.shape_labels[0] : o.shape_labels[1]);
  }
}

// The per-call time is the slope between the two graphs' replay times: the fixed cost of a replay (launch
// latency, the first call's start) drops out, and a disturbed round does not move the median.
TEST(GraphTiming, SlopeBetweenGraphLengthsRemovesTheFixedCostPerReplay) {
  const double per_call = 10.8, fixed = 6.0;
  const int short_calls = 20, long_calls = 100;
  std::vector<double> short_us, long_us;
  for (int r = 0; r < 9; ++r) {
    const double jitter = 0.01 * ((r * 7) % 5 - 2);  // +-0.02 us per replay
    short_us.push_back(fixed + short_calls * per_call + jitter);
    long_us.push_back(fixed + long_calls * per_call - jitter);
  }
  long_us[3] += 400.0;  // one round disturbed (another process, a clock change)
  const GraphTiming t = graphTimingFromReplays(short_us, long_us, short_calls, long_calls);
  EXPECT_NEAR(t.per_call_us, per_call, 1e-3);
  EXPECT_NEAR(t.graph_us, per_call + fixed / short_calls, 1e-3) << "the short graph's average keeps the fixed cost";

  const GraphTiming none = graphTimingFromReplays(short_us, long_us, 20, 20);
  EXPECT_EQ(none.per_call_us, 0.0) << "equal lengths give no slope";
  EXPECT_EQ(graphTimingFromReplays({}, {}, 20, 100).per_call_us, 0.0);
}

// Checked before anything touches the GPU.
TEST(GemmBenchReport, LabelsMustMatchTheShapes) {
  GemmBenchOptions o;
  o.shapes = {{256, 512}, {128, 256}};
  o.shape_labels = {"expert down"};
  GemmBenchReport rep;
  const Status s = runGemmBenchmark(o, &rep);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message.find("1 shape labels for 2 shapes"), std::string::npos) << s.message;
}

// A progress callback that says stop stops the benchmarks before they touch the GPU, with a Status that says
// so (the CLI turns it into exit code 130) and the report untouched. Host-side: runs without a GPU.
TEST(BenchCancel, AStopBeforeTheStartCancelsWithoutTheGpu) {
  int calls = 0;
  const BenchProgressFn stop = [&calls](double, std::string_view) {
    ++calls;
    return false;
  };
  GemmBenchReport gemm;
  gemm.rows = {rowWithLabel("kept")};
  const Status g = runGemmBenchmark(GemmBenchOptions{}, &gemm, {}, stop);
  EXPECT_TRUE(g.cancelled()) << g.message;
  EXPECT_FALSE(g.ok());
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(gemm.rows.size(), 1u) << "a cancelled run leaves the report as it was";
  EXPECT_EQ(gemm.rows[0].label, "kept");

  QuantizeBenchReport quant;
  quant.hqq_ms = 42;
  const Status q = runQuantizeBenchmark(QuantizeBenchOptions{}, &quant, {}, stop);
  EXPECT_TRUE(q.cancelled()) << q.message;
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(quant.hqq_ms, 42);

  EXPECT_FALSE(Status::failure(-1, "x").cancelled());
  EXPECT_FALSE(Status::success().cancelled());
}

// On the GPU: the progress callback is asked between measurements, with fractions that only grow up to 1, and a
// stop there ends the run at once (no further measurement), as cancelled.
TEST(BenchCancel, StopsBetweenMeasurements) {
  REQUIRE_GPU();
  GemmBenchOptions o;
  o.shapes = {{512, 1024}, {256, 512}};
  o.batches = {1, 16};
  o.replays = 20;
  o.compensator_rank = 32;
  std::vector<double> fractions;
  std::vector<std::string> stages;
  const BenchProgressFn record = [&](double f, std::string_view stage) {
    fractions.push_back(f);
    stages.emplace_back(stage);
    return true;
  };
  GemmBenchReport full;
  const Status s = runGemmBenchmark(o, &full, {}, record);
  ASSERT_TRUE(s.ok()) << s.message;
  ASSERT_EQ(full.rows.size(), 4u);
  ASSERT_GE(fractions.size(), 4u * 5u) << "a check and four timings per row";
  EXPECT_TRUE(std::is_sorted(fractions.begin(), fractions.end()));
  EXPECT_GE(fractions.front(), 0.0);
  EXPECT_EQ(fractions.back(), 1.0);

  // Stop at the second row's first timing: nothing after it runs.
  const std::size_t stop_at =
      std::size_t(std::find(stages.begin(), stages.end(), "512x1024 m=16: timing W3A16") - stages.begin());
  ASSERT_LT(stop_at, stages.size());
  std::size_t calls = 0;
  const BenchProgressFn stop = [&](double, std::string_view) { return calls++ < stop_at; };
  GemmBenchReport cancelled;
  const auto t0 = std::chrono::steady_clock::now();
  const Status c = runGemmBenchmark(o, &cancelled, {}, stop);
  EXPECT_TRUE(c.cancelled()) << c.message;
  EXPECT_NE(c.message.find("512x1024 m=16: timing W3A16"), std::string::npos) << c.message;
  EXPECT_EQ(calls, stop_at + 1) << "no progress call after the stop";
  EXPECT_TRUE(cancelled.rows.empty());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
}

// `moewb bench gemm` ends promptly on SIGTERM (as on Ctrl-C): "cancelled" and exit code 130, no report.
TEST(BenchCancel, CliBenchGemmStopsOnSigterm) {
  REQUIRE_GPU();
  if (access(MOEWB_CLI_PATH, X_OK) != 0) GTEST_SKIP() << "no moewb at " << MOEWB_CLI_PATH;
  const std::filesystem::path err =
      std::filesystem::temp_directory_path() / ("moewb_bench_sigterm_" + std::to_string(getpid()) + ".txt");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::FILE* f = std::freopen(err.c_str(), "w", stderr);
    std::FILE* o = std::freopen("/dev/null", "w", stdout);
    if (!f || !o) _exit(127);
    execl(MOEWB_CLI_PATH, MOEWB_CLI_PATH, "bench", "gemm", "--shapes", "4096x14336,14336x4096", "--m",
          "1,2,4,8,16,32,64", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Past the start (the handler is installed first thing), into the measurements, which take minutes.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  ASSERT_EQ(kill(child, SIGTERM), 0);
  const auto sent = std::chrono::steady_clock::now();
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(child, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - sent < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "moewb bench gemm still ran 30 s after SIGTERM";
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  std::ifstream in(err);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(err);
  ASSERT_TRUE(WIFEXITED(status)) << text;
  EXPECT_EQ(WEXITSTATUS(status), 130) << text;
  EXPECT_NE(text.find("cancelled"), std::string::npos) << text;
  EXPECT_LT(seconds, 10.0) << "one measurement at most after the signal";
  std::printf("moewb bench gemm ended %.2f s after SIGTERM\n", seconds);
}

}  // namespace

// SPDX-License-Identifier: MIT
// The seam of the engine's GPU path: a LinearBackend installed on an engine receives every weight GEMM of
// its forward passes (and only of its own), and a backend that forwards to the CPU changes nothing. Runs
// everywhere (no GPU needed); the cuBLAS backend itself is compared with the CPU in tests/gpu.
#include "moewb/engine/linear_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "moewb/engine/engine.h"
#include "moewb/engine/evaluate.h"
#include "moewb/engine/kernels.h"
#include "moewb/engine/kv_capture.h"
#include "test_support.h"

namespace moewb::engine {
namespace {

// Counts the GEMMs it is given and computes them with the CPU implementation.
class CountingBackend : public LinearBackend {
 public:
  void linear(const float* x, int64_t n, const MatrixRM& w, const float* bias, float* y) override {
    ++calls;
    flops += 2 * n * w.rows() * w.cols();
    cpuLinear(x, n, w, bias, y);
  }
  std::string name() const override { return "counting"; }
  std::atomic<int64_t> calls{0}, flops{0};
};

// Which experts each MoE layer used (an expert no token chose is never multiplied).
struct ExpertsUsed : ForwardObserver {
  std::vector<std::set<int>> per_layer;
  void onRouting(const RoutingView& r) override {
    if (static_cast<int>(per_layer.size()) <= r.moe_index) per_layer.resize(r.moe_index + 1);
    for (int64_t i = 0; i < r.tokens * r.top_k; ++i) per_layer[r.moe_index].insert(r.experts[i]);
  }
  bool wantsLogits() const override { return true; }
};

std::vector<int32_t> promptIds(int n, int vocab) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = 3 + (i * 7919) % (vocab - 3);
  return ids;
}

TEST(LinearBackend, ReceivesEveryWeightGemmOfTheForwardPass) {
  auto engine = MoeEngine::open(test::demoModelDir().string());
  const ModelConfig& c = engine->config();
  ASSERT_EQ(c.model_type, "mixtral");  // the count below is Mixtral's structure
  auto counting = std::make_shared<CountingBackend>();
  engine->setLinearBackend(counting);
  SequenceBatch batch;
  const auto ids = promptIds(600, c.vocab);  // > 512 rows: the LM head runs in two blocks
  batch.add(ids);
  ExpertsUsed used;
  engine->forward(batch, used);

  // Per layer q, k, v, o and the router, three projections per expert used; the head per 512 rows.
  int64_t expected = 0;
  for (int l = 0; l < c.layers; ++l)
    expected += 4 + 1 + 3 * static_cast<int64_t>(used.per_layer.at(l).size());
  expected += (static_cast<int64_t>(ids.size()) + 511) / 512;
  EXPECT_EQ(counting->calls.load(), expected);
}

TEST(LinearBackend, ForwardingToTheCpuLeavesResultsBitIdentical) {
  auto engine = MoeEngine::open(test::demoModelDir().string());
  const auto ids = promptIds(64, engine->config().vocab);
  const MatrixRM cpu_logits = engine->logits(ids);
  EvalOptions options;
  options.seq_len = 64;
  options.max_windows = 3;
  const auto window_ids = promptIds(3 * 64, engine->config().vocab);
  const PerplexityResult cpu_ppl = evaluatePerplexity(*engine, window_ids, options);
  const KvCapture cpu_kv = captureKv(*engine, ids);

  auto counting = std::make_shared<CountingBackend>();
  engine->setLinearBackend(counting);
  const MatrixRM logits = engine->logits(ids);
  EXPECT_EQ((logits - cpu_logits).cwiseAbs().maxCoeff(), 0.0f);
  const PerplexityResult ppl = evaluatePerplexity(*engine, window_ids, options);
  EXPECT_EQ(ppl.ppl, cpu_ppl.ppl);
  const KvCapture kv = captureKv(*engine, ids);
  EXPECT_EQ(kv.keys, cpu_kv.keys);
  EXPECT_EQ(kv.attention, cpu_kv.attention);
  EXPECT_GT(counting->calls.load(), 0);

  // Taking the backend off returns the engine to the CPU: no further calls reach it.
  engine->setLinearBackend(nullptr);
  const int64_t before = counting->calls.load();
  EXPECT_EQ((engine->logits(ids) - cpu_logits).cwiseAbs().maxCoeff(), 0.0f);
  EXPECT_EQ(counting->calls.load(), before);
}

// Regression guard for the dispatch being per thread: an engine without a backend running beside one
// with a backend (as a GUI worker beside a CLI-style evaluation in one process) stays on the CPU, and the
// backend sees exactly the GEMMs of its own engine.
TEST(LinearBackend, IsPerEngineAndThreadNotGlobal) {
  auto with_backend = MoeEngine::open(test::demoModelDir().string());
  auto without = MoeEngine::open(test::demoModelDir().string());
  const auto ids = promptIds(48, with_backend->config().vocab);

  auto solo = std::make_shared<CountingBackend>();
  with_backend->setLinearBackend(solo);
  with_backend->logits(ids);
  const int64_t calls_of_one_pass = solo->calls.load();
  ASSERT_GT(calls_of_one_pass, 0);

  auto counting = std::make_shared<CountingBackend>();
  with_backend->setLinearBackend(counting);
  const MatrixRM expected = without->logits(ids);
  MatrixRM a, b;
  std::thread t1([&] {
    for (int i = 0; i < 3; ++i) a = with_backend->logits(ids);
  });
  std::thread t2([&] {
    for (int i = 0; i < 3; ++i) b = without->logits(ids);
  });
  t1.join();
  t2.join();
  EXPECT_EQ(counting->calls.load(), 3 * calls_of_one_pass);
  EXPECT_EQ((a - expected).cwiseAbs().maxCoeff(), 0.0f);
  EXPECT_EQ((b - expected).cwiseAbs().maxCoeff(), 0.0f);
  EXPECT_EQ(currentLinearBackend(), nullptr);  // forward() restored this thread's (absent) backend
}

TEST(LinearBackend, ScopesNestAndRestore) {
  CountingBackend outer, inner;
  EXPECT_EQ(currentLinearBackend(), nullptr);
  MatrixRM w = MatrixRM::Random(3, 5), x = MatrixRM::Random(2, 5), y(2, 3);
  {
    ScopedLinearBackend a(&outer);
    linear(x.data(), 2, w, nullptr, y.data());
    {
      ScopedLinearBackend b(&inner);
      linear(x.data(), 2, w, nullptr, y.data());
      ScopedLinearBackend cpu(nullptr);
      linear(x.data(), 2, w, nullptr, y.data());
    }
    EXPECT_EQ(currentLinearBackend(), &outer);
    linear(x.data(), 2, w, nullptr, y.data());
  }
  EXPECT_EQ(currentLinearBackend(), nullptr);
  EXPECT_EQ(outer.calls.load(), 2);
  EXPECT_EQ(inner.calls.load(), 1);
  const MatrixRM expected = x * w.transpose();
  EXPECT_LT((y - expected).cwiseAbs().maxCoeff(), 1e-5f);
}

// `--device cuda` never fails a run: without CUDA in the build or without a GPU it says so in one line
// and computes on the CPU; the JSON says which device ran.
TEST(LinearBackend, CliDeviceCudaFallsBackToCpuWithOneClearLine) {
  std::string out, err;
  const int rc =
      test::runCli("eval --text '" + (test::sourceDir() / "resources/demo-text/sample.txt").string() +
                       "' --seq-len 64 --max-windows 2 --device cuda --json",
                   &out, &err);
  ASSERT_EQ(rc, 0) << err;
  const auto j = nlohmann::json::parse(out);
  ASSERT_TRUE(j.contains("device")) << out;
  if (j["device"] == "cuda") {
    EXPECT_GT(j["gemms_on_gpu"].get<int64_t>(), 0);
  } else {
    EXPECT_EQ(j["device"], "cpu");
    EXPECT_NE(err.find("moewb eval: --device cuda: "), std::string::npos) << err;
    EXPECT_NE(err.find("; running on the CPU"), std::string::npos) << err;
    EXPECT_TRUE(j.contains("device_fallback_reason"));
  }
}

TEST(LinearBackend, CliRejectsAnUnknownDeviceNamingTheOption) {
  std::string out, err;
  EXPECT_NE(test::runCli("freq --device gpu --max-windows 1", &out, &err), 0);
  EXPECT_NE(err.find("--device"), std::string::npos) << err;
}

}  // namespace
}  // namespace moewb::engine

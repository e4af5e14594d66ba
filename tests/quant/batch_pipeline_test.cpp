// SPDX-License-Identifier: MIT
// quantizeModel with a BatchBackend (the GPU path's pipeline) driven by a fake backend on the CPU:
// batches hold one shape and rank, respect the memory budget, results keep the order asked for and
// equal the CPU path's when the backend computes what the CPU computes, progress only moves forward,
// a cancel stops the backend and keeps nothing, and what a backend cannot do runs on the CPU.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/error.h"
#include "moewb/parallel.h"
#include "moewb/quant/batch_backend.h"
#include "moewb/quant/model_quantizer.h"
#include "moewb/quant/rank_policy.h"
#include "moewb/quant/synthetic_source.h"
#include "test_support.h"

namespace {

using namespace moewb::quant;
using moewb::MatrixRM;

// Computes every matrix with the CPU's own computeMatrix, so whatever differs from the CPU path is the
// pipeline's doing. Records each call.
class ForwardingBackend : public BatchBackend {
 public:
  struct Call {
    int64_t rows, cols;
    int rank;
    std::vector<std::string> names;
  };
  std::string name() const override { return "fake"; }
  std::string unsupportedReason(const QuantizeSettings& s, int64_t rows, int64_t cols,
                                int rank) const override {
    (void)rows;
    (void)rank;
    if (cols == unsupported_cols)
      return "the fake backend does no " + std::to_string(cols) + "-column matrices";
    return {};
  }
  int64_t memoryBudget() const override { return budget; }
  int64_t bytesPerMatrix(const QuantizeSettings&, int64_t rows, int64_t cols, int) const override {
    return rows * cols * 4;
  }
  std::vector<ComputedMatrix> quantize(const BatchRequest& r, BatchTimings* t) override {
    std::lock_guard lock(mutex);
    calls.push_back({r.rows, r.cols, r.rank, r.names});
    if (fail_on_call == int(calls.size())) throw moewb::Error("fake failure in " + r.names.front());
    for (const MatrixRM* w : r.weights) {
      EXPECT_EQ(w->rows(), r.rows);
      EXPECT_EQ(w->cols(), r.cols);
    }
    std::vector<ComputedMatrix> out(r.weights.size());
    moewb::parallelFor(r.weights.size(), [&](std::size_t j) {
      out[j] = computeMatrix(*r.weights[j], *r.settings, r.rank, r.seeds[j], 1);
    });
    if (truncate_codes) out.front().base.codes.pop_back();
    t->compute = 1e-3;
    return out;
  }

  int64_t budget = int64_t(1) << 40;
  int64_t unsupported_cols = -1;
  int fail_on_call = -1;
  bool truncate_codes = false;
  std::mutex mutex;
  std::vector<Call> calls;
};

struct Demo {
  std::shared_ptr<moewb::ModelCatalog> catalog =
      std::make_shared<moewb::ModelCatalog>(moewb::Checkpoint::open(moewb::test::demoModelDir().string()));
  // Layers 0 and 1: attention (256x256 q/o, 128x256 k/v) and 16 experts of three matrices.
  std::vector<std::size_t> matrices() const {
    std::vector<std::size_t> out;
    for (std::size_t i : quantizableMatrices(*catalog)) {
      const std::string& n = catalog->matrices()[i].name;
      if (globMatch("model.layers.0.*", n) || globMatch("model.layers.1.*", n)) out.push_back(i);
    }
    return out;
  }
};

QuantizeSettings miloSettings() {
  QuantizeSettings s;
  s.method = "milo";
  s.milo.svd.method = SvdMethod::Randomized;
  s.milo.max_iters = 2;
  s.seed = 7;
  return s;
}

// Ranks that differ between matrices of one shape, so grouping by rank matters.
std::vector<int> mixedRanks(const moewb::ModelCatalog& c, const std::vector<std::size_t>& mats) {
  return ranksForPolicy(c, mats, RankPolicy::parse("uniform-4;*.experts.3.*=8;*.q_proj.weight=16"));
}

void expectSameMatrix(const QuantizedMatrix& a, const QuantizedMatrix& b) {
  SCOPED_TRACE(a.source.name);
  EXPECT_EQ(a.source.name, b.source.name);
  EXPECT_EQ(a.matrix, b.matrix);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.base.codes, b.base.codes);
  EXPECT_EQ(a.base.scales, b.base.scales);
  EXPECT_EQ(a.base.zeros, b.base.zeros);
  ASSERT_EQ(a.u.has_value(), b.u.has_value());
  if (a.u) {
    EXPECT_EQ(a.u->codes, b.u->codes);
    EXPECT_EQ(a.u->scales, b.u->scales);
    EXPECT_EQ(a.v->codes, b.v->codes);
    EXPECT_EQ(a.v->scales, b.v->scales);
  }
  EXPECT_EQ(a.rel_error, b.rel_error);
  EXPECT_EQ(a.rel_error_float_compensators, b.rel_error_float_compensators);
  EXPECT_EQ(a.curve, b.curve);
  EXPECT_EQ(a.kurtosis, b.kurtosis);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.original_bytes, b.original_bytes);
}

TEST(BatchPipeline, ResultsEqualTheCpuPathWhenTheBackendComputesWhatTheCpuDoes) {
  const Demo demo;
  const auto mats = demo.matrices();
  for (std::string method : {"hqq", "milo"}) {
    SCOPED_TRACE(method);
    QuantizeSettings s = miloSettings();
    s.method = method;
    const auto ranks = mixedRanks(*demo.catalog, mats);
    const ModelQuantization cpu = quantizeModel(*demo.catalog, s, mats, ranks);
    ForwardingBackend backend;
    PipelineOptions o;
    o.backend = &backend;
    o.max_batch = 5;
    const ModelQuantization batched = quantizeModel(*demo.catalog, s, mats, ranks, {}, {}, {}, o);
    ASSERT_EQ(batched.matrices.size(), mats.size());
    for (std::size_t i = 0; i < mats.size(); ++i) expectSameMatrix(batched.matrices[i], cpu.matrices[i]);
    EXPECT_EQ(batched.compressed_bytes, cpu.compressed_bytes);
    EXPECT_EQ(batched.original_bytes, cpu.original_bytes);
    EXPECT_EQ(batched.device, "fake");
    EXPECT_EQ(cpu.device, "cpu");
    EXPECT_EQ(batched.backend_matrices, mats.size());
    EXPECT_TRUE(batched.fallbacks.empty());
    EXPECT_EQ(batched.timings.batches, int(backend.calls.size()));
  }
}

TEST(BatchPipeline, BatchesHoldOneShapeAndRankInCatalogOrder) {
  const Demo demo;
  const auto mats = demo.matrices();
  const auto ranks = mixedRanks(*demo.catalog, mats);
  std::map<std::string, std::pair<std::size_t, int>> position;  // name -> (index in mats, rank)
  for (std::size_t i = 0; i < mats.size(); ++i)
    position[demo.catalog->matrices()[mats[i]].name] = {i, ranks[i]};
  ForwardingBackend backend;
  PipelineOptions o;
  o.backend = &backend;
  o.max_batch = 6;
  QuantizeSettings s = miloSettings();
  s.milo.max_iters = 1;
  const ModelQuantization q = quantizeModel(*demo.catalog, s, mats, ranks, {}, {}, {}, o);
  std::set<std::string> seen;
  std::map<std::tuple<int64_t, int64_t, int>, std::size_t> last_of_group;
  std::size_t previous_group_start = 0;
  for (const auto& call : backend.calls) {
    ASSERT_FALSE(call.names.empty());
    EXPECT_LE(call.names.size(), 6u);
    std::size_t previous = 0;
    for (std::size_t j = 0; j < call.names.size(); ++j) {
      const auto& [index, rank] = position.at(call.names[j]);
      const auto& m = demo.catalog->matrices()[mats[index]];
      EXPECT_EQ(m.rows, call.rows) << call.names[j];
      EXPECT_EQ(m.cols, call.cols) << call.names[j];
      EXPECT_EQ(rank, call.rank) << call.names[j];
      EXPECT_TRUE(seen.insert(call.names[j]).second) << call.names[j] << " sent twice";
      if (j > 0) EXPECT_GT(index, previous) << "a batch keeps catalog order";
      previous = index;
    }
    // A group continues where it stopped; a new group starts after the previous group's first matrix.
    const auto key = std::make_tuple(call.rows, call.cols, call.rank);
    const std::size_t first = position.at(call.names.front()).first;
    if (auto it = last_of_group.find(key); it != last_of_group.end()) {
      EXPECT_GT(first, it->second);
    } else {
      EXPECT_GE(first, previous_group_start) << "groups start in catalog order";
      previous_group_start = first;
    }
    last_of_group[key] = previous;
  }
  EXPECT_EQ(seen.size(), mats.size());
  // Groups over two layers: q (256x256, rank 16) 2 matrices, o (256x256, 4) 2, k+v (128x256, 4) 4,
  // w1+w3 (512x256, 4) 28, w2 (256x512, 4) 14, and expert 3's w1+w3 (rank 8) 4 and w2 2. At most 6 per
  // call: 1 + 1 + 1 + 5 + 3 + 1 + 1.
  EXPECT_EQ(backend.calls.size(), 13u);
  for (std::size_t i = 0; i < mats.size(); ++i)
    EXPECT_EQ(q.matrices[i].source.name, demo.catalog->matrices()[mats[i]].name)
        << "results keep the order asked";
}

TEST(BatchPipeline, BatchSizeFollowsTheBackendsMemoryAndTooLargeMatricesFallBack) {
  const Demo demo;
  const auto mats = demo.matrices();
  ForwardingBackend backend;
  // Room for two 512x256 expert matrices (512 KiB each) and nothing bigger.
  backend.budget = 2 * 512 * 256 * 4 + 100;
  PipelineOptions o;
  o.backend = &backend;
  QuantizeSettings s;
  s.method = "hqq";
  const ModelQuantization q = quantizeModel(*demo.catalog, s, mats, {}, {}, {}, {}, o);
  for (const auto& call : backend.calls)
    EXPECT_LE(call.rows * call.cols * 4 * int64_t(call.names.size()), backend.budget);
  EXPECT_EQ(q.backend_matrices, mats.size());  // every demo matrix fits alone
  // Less than one matrix: the group goes to the CPU and the report says why.
  ForwardingBackend tiny;
  tiny.budget = 256 * 256 * 4 - 1;  // 256x256 does not fit; 128x256 does
  o.backend = &tiny;
  const ModelQuantization t = quantizeModel(*demo.catalog, s, mats, {}, {}, {}, {}, o);
  ASSERT_FALSE(t.fallbacks.empty());
  EXPECT_NE(t.fallbacks.front().find("needs"), std::string::npos) << t.fallbacks.front();
  for (const auto& call : tiny.calls) EXPECT_EQ(call.rows * call.cols, 128 * 256);
  const ModelQuantization cpu = quantizeModel(*demo.catalog, s, mats, {});
  for (std::size_t i = 0; i < mats.size(); ++i) expectSameMatrix(t.matrices[i], cpu.matrices[i]);
}

TEST(BatchPipeline, ProgressOnlyMovesForwardAndEveryResultAndIterationIsReported) {
  const Demo demo;
  const auto mats = demo.matrices();
  const auto ranks = mixedRanks(*demo.catalog, mats);
  ForwardingBackend backend;
  PipelineOptions o;
  o.backend = &backend;
  o.max_batch = 4;
  std::vector<double> fractions;
  std::set<std::size_t> done;
  std::map<std::size_t, std::vector<std::pair<int, double>>> iterations;
  const ModelQuantization q = quantizeModel(
      *demo.catalog, miloSettings(), mats, ranks,
      [&](double f, std::string_view) {
        fractions.push_back(f);
        return true;
      },
      [&](const QuantizedMatrix& m) { EXPECT_TRUE(done.insert(m.matrix).second) << m.source.name; },
      [&](std::size_t matrix, int iteration, double error) {
        iterations[matrix].emplace_back(iteration, error);
      },
      o);
  ASSERT_FALSE(fractions.empty());
  for (std::size_t i = 1; i < fractions.size(); ++i)
    EXPECT_GE(fractions[i], fractions[i - 1]) << "report " << i;
  EXPECT_DOUBLE_EQ(fractions.back(), 1.0);
  EXPECT_EQ(done.size(), mats.size());
  for (const auto& m : q.matrices) {
    const auto& its = iterations[m.matrix];
    ASSERT_EQ(its.size(), m.curve.size()) << m.source.name;
    for (std::size_t t = 0; t < its.size(); ++t) {
      EXPECT_EQ(its[t].first, int(t) + 1);
      EXPECT_EQ(its[t].second, m.curve[t]);
    }
  }
}

// The CPU path's workers report estimates out of order; what reaches the user only moves forward too.
TEST(BatchPipeline, CpuPathProgressOnlyMovesForward) {
  const Demo demo;
  const auto mats = demo.matrices();
  QuantizeSettings s = miloSettings();
  s.milo.max_iters = 4;
  s.milo.tol = -1;  // every iteration reports
  s.threads = 4;
  std::vector<double> fractions;
  quantizeModel(*demo.catalog, s, mats, mixedRanks(*demo.catalog, mats), [&](double f, std::string_view) {
    fractions.push_back(f);
    return true;
  });
  ASSERT_GT(fractions.size(), mats.size());
  for (std::size_t i = 1; i < fractions.size(); ++i)
    ASSERT_GE(fractions[i], fractions[i - 1]) << "report " << i;
  EXPECT_DOUBLE_EQ(fractions.back(), 1.0);
}

TEST(BatchPipeline, CancelStopsTheBackendAndKeepsNothing) {
  const Demo demo;
  const auto mats = demo.matrices();
  ForwardingBackend backend;
  PipelineOptions o;
  o.backend = &backend;
  o.max_batch = 2;
  QuantizeSettings s;
  s.method = "hqq";
  std::atomic<std::size_t> finished{0};
  std::atomic<bool> stop{false};
  EXPECT_THROW(quantizeModel(
                   *demo.catalog, s, mats, {}, [&](double, std::string_view) { return !stop; },
                   [&](const QuantizedMatrix&) {
                     if (++finished == 3) stop = true;  // the next progress report cancels
                   },
                   {}, o),
               moewb::Cancelled);
  EXPECT_LT(finished.load(), mats.size());
  // The call in flight when the cancel came and at most one more (read ahead) may have run.
  EXPECT_LE(backend.calls.size(), 4u);
}

TEST(BatchPipeline, WhatTheBackendCannotDoRunsOnTheCpuWithTheReason) {
  const Demo demo;
  const auto mats = demo.matrices();
  for (std::string method : {"rtn", "milo"}) {
    SCOPED_TRACE(method);
    QuantizeSettings s = miloSettings();
    s.method = method;
    const auto ranks = mixedRanks(*demo.catalog, mats);
    ForwardingBackend backend;
    backend.unsupported_cols = 512;  // the experts' w2 (256x512)
    PipelineOptions o;
    o.backend = &backend;
    const ModelQuantization q = quantizeModel(*demo.catalog, s, mats, ranks, {}, {}, {}, o);
    const ModelQuantization cpu = quantizeModel(*demo.catalog, s, mats, ranks);
    for (std::size_t i = 0; i < mats.size(); ++i) expectSameMatrix(q.matrices[i], cpu.matrices[i]);
    ASSERT_EQ(q.fallbacks.size(), 1u);
    if (method == "rtn") {
      EXPECT_TRUE(backend.calls.empty());
      EXPECT_EQ(q.device, "cpu");
      EXPECT_EQ(q.fallbacks.front(),
                std::to_string(mats.size()) + " matrices on the CPU: rtn has no batched (GPU) implementation");
    } else {
      EXPECT_EQ(q.device, "fake");
      EXPECT_EQ(q.backend_matrices, mats.size() - 16);  // 2 layers x 8 experts' w2
      EXPECT_EQ(q.fallbacks.front(), "16 matrices on the CPU: the fake backend does no 512-column matrices");
      for (const auto& call : backend.calls) EXPECT_NE(call.cols, 512);
    }
  }
}

TEST(BatchPipeline, BackendFailuresAndBadResultsNameTheTensors) {
  const Demo demo;
  const auto mats = demo.matrices();
  QuantizeSettings s;
  s.method = "hqq";
  ForwardingBackend failing;
  failing.fail_on_call = 2;
  PipelineOptions o;
  o.backend = &failing;
  o.max_batch = 3;
  try {
    quantizeModel(*demo.catalog, s, mats, {}, {}, {}, {}, o);
    FAIL() << "the backend's failure must reach the caller";
  } catch (const moewb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("fake failure in model.layers."), std::string::npos) << e.what();
  }
  ForwardingBackend broken;
  broken.truncate_codes = true;
  o.backend = &broken;
  try {
    quantizeModel(*demo.catalog, s, mats, {}, {}, {}, {}, o);
    FAIL() << "a result of the wrong size must be refused";
  } catch (const moewb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0."), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("codes"), std::string::npos) << e.what();
  }
}

TEST(BatchPipeline, WithoutPayloadsOnlyTheReportIsKept) {
  const Demo demo;
  const auto mats = demo.matrices();
  ForwardingBackend backend;
  PipelineOptions o;
  o.backend = &backend;
  o.keep_payloads = false;
  QuantizeSettings s = miloSettings();
  std::size_t with_codes = 0;
  const auto ranks = mixedRanks(*demo.catalog, mats);
  const ModelQuantization q = quantizeModel(
      *demo.catalog, s, mats, ranks, {},
      [&](const QuantizedMatrix& m) { with_codes += !m.base.codes.empty(); }, {}, o);
  EXPECT_EQ(with_codes, mats.size()) << "on_matrix_done still sees everything";
  const ModelQuantization full = quantizeModel(*demo.catalog, s, mats, ranks);
  for (std::size_t i = 0; i < mats.size(); ++i) {
    EXPECT_TRUE(q.matrices[i].base.codes.empty());
    EXPECT_FALSE(q.matrices[i].u.has_value());
    EXPECT_EQ(q.matrices[i].rel_error, full.matrices[i].rel_error);
    EXPECT_EQ(q.matrices[i].bytes, full.matrices[i].bytes);
  }
  EXPECT_EQ(q.compressed_bytes, full.compressed_bytes);
}

// A backend that keeps no iteration history (a GPU rank-0 MiLo is one HQQ) is stored like the CPU's.
TEST(BatchPipeline, StoringAComputedMatrixWithoutHistoryMeasuresIt) {
  const Demo demo;
  const MatrixRM w = demo.catalog->readMatrix(demo.catalog->matrices()[demo.matrices().front()]);
  QuantizeSettings s = miloSettings();
  ComputedMatrix c;
  c.base = quantizeHqq(w, s.grouped, s.milo.hqq);
  const QuantizedMatrix q = storeMatrix(w, s, 0, std::move(c));
  ASSERT_EQ(q.curve.size(), 1u);
  EXPECT_EQ(q.rel_error, q.curve[0]);
  EXPECT_FALSE(q.u.has_value());
  EXPECT_EQ(q.rel_error, quantizeMatrix(w, s, 0, 1).rel_error);
}

TEST(CatalogSource, ReadsAgainAfterReleasingTheMappedPages) {
  const Demo demo;
  const CatalogSource source(*demo.catalog);
  for (std::size_t i : {demo.matrices().front(), demo.matrices().back()}) {
    const MatrixRM a = source.read(i);
    source.release(i);
    EXPECT_EQ(source.read(i), a) << demo.catalog->matrices()[i].name;
    EXPECT_EQ(source.storedBytes(i), a.size() * 2);  // bf16
  }
}

TEST(SyntheticSource, HasMixtralShapesNamesAndClasses) {
  const SyntheticModelSource source(*syntheticModelPreset("mixtral-8x7b"));
  ASSERT_EQ(source.matrices().size(), 32u * (4 + 8 * 3));
  EXPECT_EQ(quantizableMatrices(source).size(), source.matrices().size());
  std::map<std::string, std::pair<int64_t, int64_t>> shapes;
  for (const auto& m : source.matrices()) shapes[m.name] = {m.rows, m.cols};
  using Shape = std::pair<int64_t, int64_t>;
  EXPECT_EQ(shapes.at("model.layers.0.self_attn.q_proj.weight"), Shape(4096, 4096));
  EXPECT_EQ(shapes.at("model.layers.31.self_attn.k_proj.weight"), Shape(1024, 4096));
  EXPECT_EQ(shapes.at("model.layers.5.self_attn.v_proj.weight"), Shape(1024, 4096));
  EXPECT_EQ(shapes.at("model.layers.5.self_attn.o_proj.weight"), Shape(4096, 4096));
  EXPECT_EQ(shapes.at("model.layers.7.block_sparse_moe.experts.7.w1.weight"), Shape(14336, 4096));
  EXPECT_EQ(shapes.at("model.layers.7.block_sparse_moe.experts.7.w2.weight"), Shape(4096, 14336));
  EXPECT_EQ(shapes.at("model.layers.7.block_sparse_moe.experts.7.w3.weight"), Shape(14336, 4096));
  const auto facts = matrixFacts(source, quantizableMatrices(source), false);
  const auto ranks = assignRanks(RankPolicy::parse("dense-512+sparse-16"), facts);
  for (std::size_t i = 0; i < facts.size(); ++i)
    EXPECT_EQ(ranks[i], facts[i].isRoutedExpert() ? 16 : 512) << facts[i].name;
  // 46.7 B parameters as Mixtral-8x7B has (quantized matrices 46.4 B + embeddings, routers, norms).
  EXPECT_NEAR(double(source.totalBytes()) / 2, 46.7e9, 0.1e9);
}

TEST(SyntheticSource, IsDeterministicWithKurtosisThatVariesBetweenMatrices) {
  const SyntheticModelSource source(*syntheticModelPreset("tiny-mixtral"));
  const SyntheticModelSource again(*syntheticModelPreset("tiny-mixtral"));
  double lowest = 1e9, highest = -1e9;
  for (std::size_t i = 0; i < source.matrices().size(); ++i) {
    const MatrixRM w = source.read(i);
    ASSERT_EQ(w, again.read(i)) << "same seed, same values";
    const double k = excessKurtosis(w);
    lowest = std::min(lowest, k);
    highest = std::max(highest, k);
    const double sigma = 1.0 / std::sqrt(double(w.cols()));
    const double rms = std::sqrt(double(w.squaredNorm()) / double(w.size()));
    EXPECT_GT(rms, 0.9 * sigma) << source.matrices()[i].name;
    EXPECT_LT(rms, 1.4 * sigma) << source.matrices()[i].name;
    EXPECT_LT(std::abs(double(w.mean())), 0.05 * sigma) << source.matrices()[i].name;
  }
  EXPECT_LT(lowest, 0.2);
  EXPECT_GT(highest, 1.5);
  auto other = *syntheticModelPreset("tiny-mixtral");
  other.seed = 2;
  EXPECT_NE(SyntheticModelSource(other).read(0), source.read(0)) << "the seed changes the weights";
}

TEST(SyntheticSource, RunsThroughThePipelineWithAKurtosisPolicy) {
  auto spec = *syntheticModelPreset("tiny-mixtral");
  spec.layers = 1;
  const SyntheticModelSource source(spec);
  const auto mats = quantizableMatrices(source);
  const auto ranks = ranksForPolicy(source, mats, RankPolicy::parse("dense-64+kurtosis-8"));
  ASSERT_EQ(ranks.size(), mats.size());
  EXPECT_GT(*std::max_element(ranks.begin() + 4, ranks.end()),
            *std::min_element(ranks.begin() + 4, ranks.end()))
      << "kurtosis gives the experts different ranks";
  ForwardingBackend backend;
  PipelineOptions o;
  o.backend = &backend;
  o.keep_payloads = false;
  QuantizeSettings s = miloSettings();
  s.milo.max_iters = 1;
  const ModelQuantization q = quantizeModel(source, s, mats, ranks, {}, {}, {}, o);
  EXPECT_EQ(q.backend_matrices, mats.size());
  for (std::size_t i = 0; i < mats.size(); ++i) {
    EXPECT_EQ(q.matrices[i].rank, ranks[i]);
    EXPECT_GT(q.matrices[i].rel_error, 0.0);
    EXPECT_LT(q.matrices[i].rel_error, 0.5);
  }
  EXPECT_EQ(q.original_bytes, source.totalBytes());
}

}  // namespace

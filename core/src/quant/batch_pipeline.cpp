// SPDX-License-Identifier: MIT
// quantizeModel with a BatchBackend: plan batches of same-shape, same-rank matrices, then stream them
// through three stages so that the backend never waits for the disk (or the generator) when it can
// be helped, and at most three batches of float32 weights exist at once:
//     reader thread: read batch i+1      this thread: backend on batch i      store thread: batch i-1
// Storing (compensator quantization, errors, callbacks) is core's own code, shared with the CPU path.
#include <fmt/format.h>

#include <chrono>
#include <future>
#include <map>
#include <tuple>

#include "moewb/error.h"
#include "moewb/parallel.h"
#include "quantize_run.h"

namespace moewb::quant::detail {
namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Batch {
  int64_t rows = 0, cols = 0;
  int rank = 0;
  std::vector<std::size_t> items;  // indices into run.matrices, in catalog order
};

struct Plan {
  std::vector<Batch> batches;
  std::vector<std::size_t> cpu_items;  // what the backend cannot do
  std::vector<std::string> fallbacks;  // why, with counts
};

std::string gib(double bytes) {
  return fmt::format("{:.2f} GiB", bytes / double(int64_t(1) << 30));
}

// Groups by (shape, rank) in order of first appearance, so the experts of a layer (same shape, and the
// same rank under most policies) share a call; each group is cut into near-equal batches no larger than
// what the backend's memory, the host batch limit and max_batch allow.
Plan planBatches(const QuantizeRun& run, BatchBackend& backend, const PipelineOptions& o) {
  Plan plan;
  std::vector<std::pair<std::string, std::size_t>> reasons;  // first-appearance order, with counts
  auto fallBack = [&](std::size_t item, const std::string& why) {
    plan.cpu_items.push_back(item);
    for (auto& [reason, count] : reasons)
      if (reason == why) {
        ++count;
        return;
      }
    reasons.emplace_back(why, 1);
  };
  struct Group {
    int64_t rows, cols;
    int rank;
    std::vector<std::size_t> items;
  };
  std::vector<Group> groups;
  std::map<std::tuple<int64_t, int64_t, int>, std::size_t> group_of;
  for (std::size_t item = 0; item < run.matrices.size(); ++item) {
    const WeightMatrix& m = run.matrix(item);
    const int rank = run.rankOf(item);
    const std::string why =
        run.method.runsOnGpu()
            ? backend.unsupportedReason(run.settings, m.rows, m.cols, rank)
            : fmt::format("{} has no batched (GPU) implementation", run.settings.method);
    if (!why.empty()) {
      fallBack(item, why);
      continue;
    }
    const auto key = std::make_tuple(m.rows, m.cols, rank);
    auto [it, added] = group_of.emplace(key, groups.size());
    if (added) groups.push_back({m.rows, m.cols, rank, {}});
    groups[it->second].items.push_back(item);
  }
  const int64_t budget = groups.empty() ? 0 : backend.memoryBudget();
  for (const Group& g : groups) {
    const int64_t per_matrix =
        std::max<int64_t>(1, backend.bytesPerMatrix(run.settings, g.rows, g.cols, g.rank));
    const int64_t by_memory = budget / per_matrix;
    if (by_memory < 1) {
      const std::string why =
          fmt::format("a {}x{} matrix{} needs {} of {} memory, {} is available", g.rows, g.cols,
                      run.method.usesRankPolicy() ? fmt::format(" at rank {}", g.rank) : "",
                      gib(double(per_matrix)), backend.name(), gib(double(budget)));
      for (std::size_t item : g.items) fallBack(item, why);
      continue;
    }
    const int64_t host_bytes = g.rows * g.cols * int64_t(sizeof(float));
    int64_t limit = std::min<int64_t>(by_memory, std::max<int64_t>(1, o.max_batch_bytes / host_bytes));
    if (o.max_batch > 0) limit = std::min<int64_t>(limit, o.max_batch);
    const std::size_t n = g.items.size();
    const std::size_t count = (n + std::size_t(limit) - 1) / std::size_t(limit);
    const std::size_t size = (n + count - 1) / count;  // near-equal batches keep the stages in step
    for (std::size_t first = 0; first < n; first += size) {
      Batch b{g.rows, g.cols, g.rank, {}};
      b.items.assign(g.items.begin() + std::ptrdiff_t(first),
                     g.items.begin() + std::ptrdiff_t(std::min(n, first + size)));
      plan.batches.push_back(std::move(b));
    }
  }
  std::sort(plan.cpu_items.begin(), plan.cpu_items.end());
  for (const auto& [reason, count] : reasons)
    plan.fallbacks.push_back(
        fmt::format("{} {} on the CPU: {}", count, count == 1 ? "matrix" : "matrices", reason));
  return plan;
}

std::string batchLabel(const QuantizeRun& run, const Batch& b) {
  const std::string& first = run.matrix(b.items.front()).name;
  const std::string more = b.items.size() > 1 ? fmt::format(" +{}", b.items.size() - 1) : "";
  return fmt::format("{}{} ({}x{}{})", first, more, b.rows, b.cols,
                     run.method.usesRankPolicy() ? fmt::format(", rank {}", b.rank) : "");
}

// A backend's results must be what storeMatrix expects; a wrong size would otherwise read out of bounds.
void checkComputed(const QuantizeRun& run, const Batch& b, const std::vector<ComputedMatrix>& computed,
                   const std::string& backend) {
  auto fail = [&](std::size_t j, const std::string& what) {
    throw Error(fmt::format("{}: the {} backend returned {}", run.matrix(b.items[j]).name, backend, what));
  };
  if (computed.size() != b.items.size())
    throw Error(fmt::format("{}: the {} backend returned {} results for {} matrices", batchLabel(run, b),
                            backend, computed.size(), b.items.size()));
  for (std::size_t j = 0; j < computed.size(); ++j) {
    const GroupedQuantized& q = computed[j].base;
    if (q.rows != b.rows || q.cols != b.cols || q.bits != run.settings.grouped.bits ||
        q.group != run.settings.grouped.group)
      fail(j, fmt::format("a {}x{} {}-bit g{} base for a {}x{} {}-bit g{} request", q.rows, q.cols, q.bits,
                          q.group, b.rows, b.cols, run.settings.grouped.bits, run.settings.grouped.group));
    const auto groups = std::size_t(q.rows * q.groupsPerRow());
    if (q.codes.size() != std::size_t(q.rows * q.cols) || q.scales.size() != groups ||
        q.zeros.size() != groups)
      fail(j, fmt::format("{} codes, {} scales and {} zeros (expected {}, {}, {})", q.codes.size(),
                          q.scales.size(), q.zeros.size(), q.rows * q.cols, groups, groups));
    if (run.method.usesRankPolicy() && b.rank > 0 &&
        (computed[j].u.rows() != b.rows || computed[j].u.cols() != b.rank || computed[j].v.rows() != b.rank ||
         computed[j].v.cols() != b.cols))
      fail(j, fmt::format("factors of {}x{} and {}x{} for rank {}", computed[j].u.rows(),
                          computed[j].u.cols(), computed[j].v.rows(), computed[j].v.cols(), b.rank));
  }
}

struct HostBatch {
  std::vector<MatrixRM> weights;
  double seconds = 0;
};

}  // namespace

void quantizeOnBackend(QuantizeRun& run, const PipelineOptions& o) {
  BatchBackend& backend = *o.backend;
  const Plan plan = planBatches(run, backend, o);
  const std::string backend_name = backend.name();
  run.out.device = plan.batches.empty() ? "cpu" : backend_name;
  run.out.fallbacks = plan.fallbacks;
  PipelineTimings& timings = run.out.timings;
  const int threads = run.settings.threads;

  // Reader: float32 copies of a batch's matrices, then the source may drop its own (mapped pages).
  auto read = [&run, threads](const Batch& b) {
    const auto t0 = Clock::now();
    HostBatch h;
    h.weights.resize(b.items.size());
    parallelFor(
        b.items.size(),
        [&](std::size_t j) {
          run.reporter.check();
          const std::size_t i = run.matrices[b.items[j]];
          h.weights[j] = run.source.read(i);
          run.source.release(i);
        },
        threads);
    h.seconds = secondsSince(t0);
    return h;
  };
  // Store: core's storage of each result (in parallel), then callbacks in catalog order.
  auto store = [&run, threads](const Batch& b, HostBatch h, std::vector<ComputedMatrix> computed) {
    const auto t0 = Clock::now();
    std::vector<QuantizedMatrix> stored(b.items.size());
    parallelFor(
        b.items.size(),
        [&](std::size_t j) {
          run.reporter.check();
          stored[j] = storeMatrix(h.weights[j], run.settings, b.rank, std::move(computed[j]));
          h.weights[j] = MatrixRM();
        },
        threads);
    for (std::size_t j = 0; j < b.items.size(); ++j) {
      for (std::size_t t = 0; t < stored[j].curve.size(); ++t)
        run.iteration(b.items[j], int(t) + 1, stored[j].curve[t]);
      run.finish(b.items[j], std::move(stored[j]));
    }
    return secondsSince(t0);
  };

  // Declared after everything they reference: on an exception their destructors wait for the threads
  // (which see the cancellation or finish their batch) before the data goes away.
  std::future<HostBatch> next;
  std::future<double> storing;
  if (!plan.batches.empty()) next = std::async(std::launch::async, read, std::cref(plan.batches.front()));
  for (std::size_t bi = 0; bi < plan.batches.size(); ++bi) {
    const Batch& b = plan.batches[bi];
    const auto wait0 = Clock::now();
    HostBatch host = next.get();
    timings.waiting_for_input += secondsSince(wait0);
    timings.read += host.seconds;
    if (bi + 1 < plan.batches.size())
      next = std::async(std::launch::async, read, std::cref(plan.batches[bi + 1]));
    if (!run.reporter.report(run.fraction(), fmt::format("{}: {} on {}", batchLabel(run, b),
                                                         run.settings.method, backend_name)))
      throw Cancelled{};
    BatchRequest request;
    request.settings = &run.settings;
    request.rows = b.rows;
    request.cols = b.cols;
    request.rank = b.rank;
    for (std::size_t j = 0; j < b.items.size(); ++j) {
      request.weights.push_back(&host.weights[j]);
      request.seeds.push_back(run.seedOf(b.items[j]));
      request.names.push_back(run.matrix(b.items[j]).name);
    }
    BatchTimings bt;
    std::vector<ComputedMatrix> computed = backend.quantize(request, &bt);
    timings.upload += bt.upload;
    timings.compute += bt.compute;
    timings.download += bt.download;
    ++timings.batches;
    timings.largest_batch = std::max(timings.largest_batch, int(b.items.size()));
    checkComputed(run, b, computed, backend_name);
    run.out.backend_matrices += b.items.size();
    if (storing.valid()) timings.store += storing.get();
    run.reporter.check();
    storing = std::async(std::launch::async, store, std::cref(b), std::move(host), std::move(computed));
  }
  if (storing.valid()) timings.store += storing.get();
  if (!plan.cpu_items.empty()) quantizeOnCpu(run, plan.cpu_items, threads);
}

}  // namespace moewb::quant::detail

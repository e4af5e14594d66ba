// SPDX-License-Identifier: MIT
#include "moewb/quant/model_quantizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>

#include "moewb/error.h"
#include "moewb/methods/registry.h"
#include "moewb/parallel.h"
#include "moewb/quant/payload.h"
#include "quantize_run.h"

namespace moewb::quant {

MatrixRM dequantize(const QuantizedMatrix& q) {
  if (q.payload) return q.payload->dequantize();
  return reconstruct(q.base, q.u ? &*q.u : nullptr, q.v ? &*q.v : nullptr);
}

bool isQuantizable(const TensorClass& c) {
  if (c.is_bias) return false;
  if (c.proj == Proj::RouterWeight || c.proj == Proj::SharedGate || c.proj == Proj::Norm ||
      c.proj == Proj::Bias)
    return false;
  return c.block == Block::Attention || c.block == Block::MlpDense || c.block == Block::Expert ||
         c.block == Block::SharedExpert;
}

std::vector<std::size_t> quantizableMatrices(const MatrixSource& source) {
  std::vector<std::size_t> out;
  const auto& mats = source.matrices();
  for (std::size_t i = 0; i < mats.size(); ++i)
    if (isQuantizable(source.classOf(i)) && mats[i].rows > 0 && mats[i].cols > 0) out.push_back(i);
  return out;
}

std::vector<std::size_t> quantizableMatrices(const ModelCatalog& catalog) {
  return quantizableMatrices(CatalogSource(catalog));
}

double excessKurtosis(const MatrixRM& w) {
  const double n = double(w.size());
  if (n == 0) return 0;
  double mean = 0;
  for (Eigen::Index i = 0; i < w.size(); ++i) mean += w.data()[i];
  mean /= n;
  double m2 = 0, m4 = 0;
  for (Eigen::Index i = 0; i < w.size(); ++i) {
    const double d = w.data()[i] - mean, d2 = d * d;
    m2 += d2;
    m4 += d2 * d2;
  }
  m2 /= n;
  m4 /= n;
  return m2 > 0 ? m4 / (m2 * m2) - 3.0 : 0.0;
}

std::vector<MatrixFacts> matrixFacts(const MatrixSource& source, const std::vector<std::size_t>& matrices,
                                     bool with_kurtosis, int threads) {
  std::vector<MatrixFacts> facts(matrices.size());
  const auto& mats = source.matrices();
  parallelFor(
      matrices.size(),
      [&](std::size_t i) {
        const WeightMatrix& m = mats.at(matrices[i]);
        const TensorClass c = source.classOf(matrices[i]);
        MatrixFacts& f = facts[i];
        f.name = m.name;
        f.rows = m.rows;
        f.cols = m.cols;
        f.block = c.block;
        f.layer = c.layer;
        f.expert = c.expert >= 0 ? c.expert : (m.slice >= 0 ? m.slice : -1);
        if (with_kurtosis) {
          f.kurtosis = excessKurtosis(source.read(matrices[i]));
          source.release(matrices[i]);  // a pass over the whole model must not keep it resident
        }
      },
      threads);
  return facts;
}

std::vector<MatrixFacts> matrixFacts(const ModelCatalog& catalog, const std::vector<std::size_t>& matrices,
                                     bool with_kurtosis, int threads) {
  return matrixFacts(CatalogSource(catalog), matrices, with_kurtosis, threads);
}

int64_t fixedBytes(const ModelCatalog& catalog, const std::vector<std::size_t>& matrices,
                   const GroupedQuantSettings& grouped) {
  const auto& ckpt = catalog.checkpoint();
  int64_t total = int64_t(ckpt.totalBytes());
  for (std::size_t i : matrices) {
    const WeightMatrix& m = catalog.matrices().at(i);
    const int64_t numel = m.rows * m.cols;
    const int64_t groups = m.rows * ((m.cols + grouped.group - 1) / grouped.group);
    total -= numel * int64_t(dtypeSize(ckpt.tensor(m.tensor).dtype));
    total += packedCodeBytes(numel, grouped.bits) + groups * 4;
  }
  return total;
}

std::vector<int> ranksForPolicy(const MatrixSource& source, const std::vector<std::size_t>& matrices,
                                const RankPolicy& policy, const ExpertFrequencies* frequencies, int threads) {
  return assignRanks(policy, matrixFacts(source, matrices, policy.needsKurtosis(), threads), frequencies);
}

std::vector<int> ranksForPolicy(const ModelCatalog& catalog, const std::vector<std::size_t>& matrices,
                                const RankPolicy& policy, const ExpertFrequencies* frequencies, int threads) {
  return ranksForPolicy(CatalogSource(catalog), matrices, policy, frequencies, threads);
}

PolicyPreview previewPolicy(const ModelCatalog& catalog, const std::vector<std::size_t>& matrices,
                            const std::vector<int>& ranks, const QuantizeSettings& settings) {
  if (ranks.size() != matrices.size())
    throw Error(fmt::format("previewPolicy: {} ranks for {} matrices", ranks.size(), matrices.size()));
  const methods::WeightMethod& method = methods::weightMethod(settings.method, "previewPolicy");
  PolicyPreview p;
  p.original_bytes = int64_t(catalog.checkpoint().totalBytes());
  p.compressed_bytes = p.original_bytes;
  for (std::size_t i = 0; i < matrices.size(); ++i) {
    const WeightMatrix& m = catalog.matrices().at(matrices[i]);
    PolicyPreview::Row row;
    row.name = m.name;
    row.rank = method.usesRankPolicy() ? ranks[i] : 0;
    const methods::PredictedSize size = method.predictedSize(settings, m.rows, m.cols, row.rank);
    row.base_bytes = size.base;
    row.compensator_bytes = size.compensator;
    row.original_bytes = m.rows * m.cols * int64_t(dtypeSize(catalog.checkpoint().tensor(m.tensor).dtype));
    p.compressed_bytes += row.base_bytes + row.compensator_bytes - row.original_bytes;
    p.rows.push_back(std::move(row));
  }
  return p;
}

ComputedMatrix computeMatrix(const MatrixRM& w, const QuantizeSettings& settings, int rank, uint64_t seed,
                             int threads, const std::function<bool(int, double)>& on_iteration) {
  return methods::weightMethod(settings.method, "quantize").compute(w, settings, rank, seed, threads, on_iteration);
}

QuantizedMatrix storeMatrix(const MatrixRM& w, const QuantizeSettings& settings, int rank,
                            ComputedMatrix&& c) {
  return methods::weightMethod(settings.method, "quantize").storeComputed(w, settings, rank, std::move(c));
}

QuantizedMatrix quantizeMatrix(const MatrixRM& w, const QuantizeSettings& settings, int rank, uint64_t seed,
                               int threads, const std::function<bool(int, double)>& on_iteration,
                               const MatrixHessian* calibration) {
  return methods::weightMethod(settings.method, "quantize")
      .quantize(w, settings, rank, seed, threads, on_iteration, calibration);
}

uint64_t matrixSeed(const QuantizeSettings& settings, std::size_t catalog_index) {
  return settings.seed + 1000003ull * catalog_index;
}

namespace detail {

void dropStoredForm(QuantizedMatrix& q) {
  // The report stays (name, rank, errors, bytes, curve); the codes and factors go.
  q.payload.reset();
  q.base.codes = {};
  q.base.scales = {};
  q.base.zeros = {};
  q.u.reset();
  q.v.reset();
}

void QuantizeRun::iteration(std::size_t item, int one_based, double error) {
  if (!on_iteration) return;
  std::lock_guard lock(iteration_mutex);
  on_iteration(matrices[item], one_based, error);
}

void QuantizeRun::finish(std::size_t item, QuantizedMatrix&& q) {
  const WeightMatrix& m = matrix(item);
  q.matrix = matrices[item];
  q.source = m;
  q.original_bytes = source.storedBytes(matrices[item]);
  reporter.check();
  double expected = done_work.load();
  while (!done_work.compare_exchange_weak(expected, expected + work(item))) {
  }
  {
    std::lock_guard lock(done_mutex);
    if (on_matrix_done) on_matrix_done(q);
  }
  if (!reporter.report(std::min(1.0, (expected + work(item)) / total_work), fmt::format("{}: done", m.name)))
    throw Cancelled{};
  if (q.payload) {
    // Shared objects (a dictionary) count once in the model's size, whether or not the payload stays.
    std::lock_guard lock(done_mutex);
    for (auto& part : q.payload->sharedParts()) shared_parts.emplace(part.object.get(), std::move(part));
  }
  if (!keep_payloads && !method.hasModelStep()) dropStoredForm(q);
  out.matrices[item] = std::move(q);
}

// The result of a matrix holding NaN/Inf weights: nothing stored, its size unchanged, its error NaN.
QuantizedMatrix nonFiniteReport(const QuantizeSettings& settings, int64_t stored_bytes) {
  QuantizedMatrix q;
  q.method = settings.method;
  q.rel_error = std::numeric_limits<double>::quiet_NaN();
  q.bytes = stored_bytes;
  return q;
}

void quantizeOnCpu(QuantizeRun& run, const std::vector<std::size_t>& items, int threads) {
  // Big matrices first so the last ones to finish are small (dynamic scheduling balances the rest).
  std::vector<std::size_t> order = items;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return run.work(a) > run.work(b); });
  const int iters = std::max(1, run.settings.milo.max_iters);
  parallelFor(
      order.size(),
      [&](std::size_t k) {
        const std::size_t i = order[k];
        run.reporter.check();
        const WeightMatrix& m = run.matrix(i);
        const double work = run.work(i);
        if (!run.reporter.report(run.fraction(), fmt::format("{}: reading", m.name))) throw Cancelled{};
        const MatrixRM w = run.source.read(run.matrices[i]);
        run.source.release(run.matrices[i]);
        auto on_iteration = [&](int t, double eps) {
          run.iteration(i, t + 1, eps);
          return run.reporter.report(run.fraction(work * double(t + 1) / iters),
                                     fmt::format("{}: MiLo iteration {} error {:.5f}", m.name, t + 1, eps));
        };
        if (!w.allFinite() && !run.method.hasModelStep()) {
          // NaN/Inf weights: no method's result would mean anything (MiLo refused without naming the
          // matrix). A report whose error is not a number lets the caller stop naming every such matrix,
          // or leave them unquantized (jobs::NonFiniteMatrices). A model step needs every stored form.
          run.finish(i, nonFiniteReport(run.settings, run.source.storedBytes(run.matrices[i])));
          return;
        }
        try {
          run.finish(i, quantizeMatrix(w, run.settings, run.rankOf(i), run.seedOf(i), 1, on_iteration,
                                       run.calibrationOf(i)));
        } catch (const Error& e) {
          // Errors of a method know the matrix's shape at best: name the matrix.
          const std::string what = e.what();
          if (what.find(m.name) != std::string::npos) throw;
          throw Error(fmt::format("{}: {}", m.name, what));
        }
      },
      threads);
}

}  // namespace detail

ModelQuantization quantizeModel(const MatrixSource& source, const QuantizeSettings& settings,
                                const std::vector<std::size_t>& matrices, const std::vector<int>& ranks,
                                const ProgressFn& progress,
                                const std::function<void(const QuantizedMatrix&)>& on_matrix_done,
                                const IterationFn& on_iteration, const PipelineOptions& options) {
  const methods::WeightMethod& method = methods::weightMethod(settings.method, "quantize");
  method.validate(settings);
  if (method.needs() == methods::MethodNeeds::CalibrationHessians && !options.calibration)
    throw Error(fmt::format("quantize: method {} needs calibration data (Hessians of each matrix's inputs on "
                            "calibration text: --calib FILE)",
                            method.name()));
  if (method.usesRankPolicy() && ranks.size() != matrices.size())
    throw Error(fmt::format("quantizeModel: {} ranks for {} matrices", ranks.size(), matrices.size()));
  const auto t0 = std::chrono::steady_clock::now();
  ModelQuantization out;
  out.settings = settings;
  out.matrices.resize(matrices.size());
  // Workers report estimates that can arrive out of order: pass on forward progress only. (The
  // reporter serialises calls, so `shown` needs no lock.)
  auto shown = std::make_shared<double>(0.0);
  ProgressReporter reporter([&progress, shown](double f, std::string_view stage) {
    *shown = std::max(*shown, f);
    return progress ? progress(*shown, stage) : true;
  });
  detail::QuantizeRun run(source, settings, method, matrices, ranks, on_matrix_done, on_iteration, reporter,
                          options.keep_payloads, out);
  run.calibration = options.calibration;
  for (std::size_t i : matrices)
    run.total_work += double(source.matrices().at(i).rows * source.matrices().at(i).cols);
  if (run.total_work <= 0) run.total_work = 1;
  // A model step (finishModel) gets the last 5% of the progress bar.
  const double matrices_share = method.hasModelStep() ? 0.95 : 1.0;
  run.total_work /= matrices_share;
  if (options.backend) {
    detail::quantizeOnBackend(run, options);
  } else {
    std::vector<std::size_t> all(matrices.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    detail::quantizeOnCpu(run, all, settings.threads);
  }
  if (reporter.cancelled()) throw Cancelled{};
  if (method.hasModelStep()) {
    method.finishModel(out, [&](double f, std::string_view stage) {
      return reporter.report(matrices_share + (1 - matrices_share) * std::clamp(f, 0.0, 1.0), stage);
    });
    if (reporter.cancelled()) throw Cancelled{};
    // The step may have replaced payloads and their shared objects: count what is stored now.
    run.shared_parts.clear();
    for (const auto& q : out.matrices)
      if (q.payload)
        for (auto& part : q.payload->sharedParts()) run.shared_parts.emplace(part.object.get(), std::move(part));
    if (!options.keep_payloads)
      for (auto& q : out.matrices) detail::dropStoredForm(q);
  }
  // The last word is "all done", from this thread once every worker stopped (a worker's own last
  // report may have been skipped while another one was reporting).
  if (!reporter.report(1.0, "quantized")) throw Cancelled{};
  out.original_bytes = source.totalBytes();
  out.compressed_bytes = out.original_bytes;
  for (const auto& q : out.matrices) out.compressed_bytes += q.bytes - q.original_bytes;
  for (const auto& [identity, part] : run.shared_parts) out.compressed_bytes += part.bytes;
  if (!method.usesRankPolicy()) out.policy.clear();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

ModelQuantization quantizeModel(const ModelCatalog& catalog, const QuantizeSettings& settings,
                                const std::vector<std::size_t>& matrices, const std::vector<int>& ranks,
                                const ProgressFn& progress,
                                const std::function<void(const QuantizedMatrix&)>& on_matrix_done,
                                const IterationFn& on_iteration, const PipelineOptions& options) {
  return quantizeModel(CatalogSource(catalog), settings, matrices, ranks, progress, on_matrix_done,
                       on_iteration, options);
}

}  // namespace moewb::quant

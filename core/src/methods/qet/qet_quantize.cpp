// SPDX-License-Identifier: MIT
// QET's memory plan, its quantization with FAISS k-means, and the baselines at equal memory (RTN, PQ,
// OPQ) that `moewb qet` compares it with.
#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#include <faiss/VectorTransform.h>
#include <faiss/impl/ProductQuantizer.h>
#include <fmt/format.h>
#include <omp.h>  // in GCC's own include path; libgomp comes with FAISS's link interface

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>

#include "moewb/dtype.h"
#include "moewb/error.h"
#include "moewb/methods/qet.h"
#include "moewb/progress.h"
#include "moewb/quant/grouped_quant.h"

namespace moewb::methods::qet {

namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void check(const KeepGoing& keep_going) {
  if (keep_going && !keep_going()) throw Cancelled{};
}

int codeBits(int clusters) {
  return clusters <= 2 ? 1 : int(std::bit_width(unsigned(clusters - 1)));
}

// As CodebookPayload stores codes: one byte / two bytes per code at 8 / 16 bits, else packed U32 words.
int64_t packedCodeBytes(int64_t count, int bits) {
  if (bits == 8) return count;
  if (bits == 16) return 2 * count;
  return 4 * quant::packedWordCount(count, bits);
}

// The nearest half-precision values below and above x (fp16 min/step chosen so the levels cover the range).
float halfAtOrBelow(float x) {
  uint16_t u = floatToHalf(x);
  if (halfToFloat(u) <= x) return halfToFloat(u);
  u = (u & 0x8000u) ? uint16_t(u + 1) : (u == 0 ? uint16_t(0x8001) : uint16_t(u - 1));
  return halfToFloat(u);
}
float halfAtOrAbove(float x) {
  uint16_t u = floatToHalf(x);
  if (halfToFloat(u) >= x) return halfToFloat(u);
  u = (u & 0x8000u) ? (u == 0x8000u ? uint16_t(0x0001) : uint16_t(u - 1)) : uint16_t(u + 1);
  return halfToFloat(u);
}

// The [rows, d] block of subspace j, contiguous (what FAISS takes).
std::vector<float> subspaceBlock(const MatrixRM& x, int64_t j, int d) {
  const int64_t rows = x.rows(), cols = x.cols();
  std::vector<float> sub(std::size_t(rows * d));
  for (int64_t r = 0; r < rows; ++r) std::copy_n(x.data() + r * cols + j * d, d, sub.data() + r * d);
  return sub;
}

// The stage's codebook as stored: fp16 values, or a'-bit levels with a per-subspace fp16 min and step
// (CQO; the levels are chosen against the stored min and step).
quant::CodebookStage storedCodebook(const std::vector<float>& centroids, int64_t m, int clusters, int d,
                                    int codebook_bits) {
  quant::CodebookStage s;
  s.clusters = clusters;
  s.codebook_bits = codebook_bits;
  if (codebook_bits == 0) {
    s.values.resize(centroids.size());
    for (std::size_t i = 0; i < centroids.size(); ++i) s.values[i] = halfToFloat(floatToHalf(centroids[i]));
    return s;
  }
  const int64_t per = int64_t(clusters) * d;
  const float top = float((1u << codebook_bits) - 1);
  s.levels.resize(centroids.size());
  for (int64_t j = 0; j < m; ++j) {
    const float* c = centroids.data() + j * per;
    const auto [lo, hi] = std::minmax_element(c, c + per);
    const float mn = halfAtOrBelow(*lo);
    const float step = *hi > mn ? halfAtOrAbove((*hi - mn) / top) : 0.0f;
    s.min.push_back(mn);
    s.step.push_back(step);
    for (int64_t i = 0; i < per; ++i) {
      const float level = step > 0 ? std::round((c[i] - mn) / step) : 0.0f;
      s.levels[std::size_t(j * per + i)] = uint16_t(std::clamp(level, 0.0f, top));
    }
  }
  return s;
}

std::vector<float> codebookEntries(const quant::CodebookStage& s, int64_t m, int d) {
  std::vector<float> out(std::size_t(m * s.clusters * d));
  for (int64_t j = 0; j < m; ++j)
    for (int64_t c = 0; c < s.clusters; ++c)
      for (int t = 0; t < d; ++t) out[std::size_t((j * s.clusters + c) * d + t)] = s.entry(j, c, t, d);
  return out;
}

void checkShape(int64_t rows, int64_t cols, const Config& c) {
  if (rows <= 0 || cols <= 0) throw Error(fmt::format("qet: empty {}x{} matrix", rows, cols));
  if (c.subspace_width <= 0 || cols % c.subspace_width != 0)
    throw Error(fmt::format("qet: subspace width {} does not divide the {} columns", c.subspace_width, cols));
  if (c.levels < 0 || c.levels > 16 || cols % (int64_t(1) << c.levels) != 0)
    throw Error(fmt::format("qet: {} entanglement levels need the columns ({}) divisible by 2^{}", c.levels,
                            cols, c.levels));
  if (c.stages < 1 || c.stages > 8) throw Error(fmt::format("qet: {} stages (expected 1..8)", c.stages));
  if (!(c.first_stage_share > 0 && c.first_stage_share <= 1))
    throw Error(fmt::format("qet: first-stage share {} (expected in (0, 1])", c.first_stage_share));
  if (c.codebook_bits != 0 && (c.codebook_bits < 2 || c.codebook_bits > 16))
    throw Error(fmt::format("qet: {}-bit codebooks (expected 0 for fp16, or 2..16)", c.codebook_bits));
  if (!(c.ratio >= 1)) throw Error(fmt::format("qet: compression ratio {} (expected >= 1)", c.ratio));
}

}  // namespace

FaissThreads::FaissThreads(int n) : saved_(omp_get_max_threads()) {
  if (n > 0) omp_set_num_threads(n);
}
FaissThreads::~FaissThreads() {
  omp_set_num_threads(saved_);
}

int64_t Plan::totalBytes() const {
  int64_t t = 0;
  for (const auto& s : stages) t += s.bytes();
  return t;
}

StagePlan stageBytes(int64_t rows, int64_t cols, int d, int clusters, int codebook_bits, int levels) {
  StagePlan p;
  p.levels = levels;
  p.clusters = clusters;
  p.codebook_bits = codebook_bits;
  const int64_t m = cols / d;
  p.indicator_bytes = 4 * ((rows * indicatorBitsPerRow(cols, levels) + 31) / 32);
  p.code_bytes = packedCodeBytes(rows * m, codeBits(clusters));
  const int64_t entries = m * clusters * d;
  p.codebook_bytes =
      codebook_bits == 0 ? 2 * entries : 4 * quant::packedWordCount(entries, codebook_bits) + 2 * 2 * m;
  return p;
}

Plan plan(int64_t rows, int64_t cols, const Config& c) {
  checkShape(rows, cols, c);
  Plan p;
  p.original_bytes = rows * cols * c.original_bits / 8;
  p.budget_bytes = int64_t(std::floor(double(p.original_bytes) / c.ratio));
  const int k_cap = int(std::min<int64_t>(rows, 65536));
  auto levelsOf = [&](int s) { return s == 0 ? c.levels : 0; };
  auto bytesAt = [&](int s, int k) {
    return stageBytes(rows, cols, c.subspace_width, k, c.codebook_bits, levelsOf(s));
  };
  int64_t indicators = 0;
  for (int s = 0; s < c.stages; ++s) indicators += bytesAt(s, 2).indicator_bytes;
  const int64_t avail = p.budget_bytes - indicators;
  // The largest k whose codes and codebook fit `bytes` (0 when not even 2 do).
  auto maxClusters = [&](int s, int64_t bytes) {
    auto cost = [&](int k) {
      const StagePlan sp = bytesAt(s, k);
      return sp.code_bytes + sp.codebook_bytes;
    };
    if (k_cap < 2 || cost(2) > bytes) return 0;
    int lo = 2, hi = k_cap + 1;  // cost(lo) fits, hi does not (or is past the cap)
    while (hi - lo > 1) {
      const int mid = lo + (hi - lo) / 2;
      (cost(mid) <= bytes ? lo : hi) = mid;
    }
    return lo;
  };
  auto fail = [&](int s) {
    const StagePlan two = bytesAt(s, 2);
    return Error(
        fmt::format("qet: a {}x{} matrix at ratio {} has {} bytes; after the indicator maps ({} bytes) stage "
                    "{} cannot hold "
                    "even 2 clusters ({} bytes): lower the ratio or the levels",
                    rows, cols, c.ratio, p.budget_bytes, indicators, s, two.code_bytes + two.codebook_bytes));
  };
  if (avail <= 0) throw fail(0);
  // Every stage's k from its share; stage 0's k is then lowered a few steps where that lets the later
  // stages fill the budget closer (a code-width step at a power of two can leave a gap of rows*m bits).
  const int k0_max = maxClusters(0, int64_t(double(avail) * (c.stages == 1 ? 1.0 : c.first_stage_share)));
  if (k0_max == 0) throw fail(0);
  std::vector<StagePlan> best;
  int64_t best_slack = std::numeric_limits<int64_t>::max();
  // (never below 85% of its share's k: the split between the stages stays what was asked)
  const int k0_min = c.stages == 1 ? k0_max : std::max(2, int(0.85 * k0_max));
  for (int k0 = k0_max; k0 >= k0_min; --k0) {
    std::vector<StagePlan> stages{bytesAt(0, k0)};
    int64_t rest = avail - (stages[0].code_bytes + stages[0].codebook_bytes);
    const int64_t even_share = c.stages > 1 ? rest / (c.stages - 1) : 0;
    bool fits = true;
    for (int s = 1; s < c.stages && fits; ++s) {
      const int k = maxClusters(s, s + 1 == c.stages ? rest : even_share);
      if (k == 0) {
        fits = false;
        break;
      }
      stages.push_back(bytesAt(s, k));
      rest -= stages.back().code_bytes + stages.back().codebook_bytes;
    }
    if (!fits) continue;
    int64_t total = 0;
    for (const auto& s : stages) total += s.bytes();
    const int64_t slack = p.budget_bytes - total;
    if (slack < best_slack) best_slack = slack, best = stages;
    if (double(slack) <= 0.002 * double(p.budget_bytes)) break;
  }
  if (best.empty()) throw fail(c.stages - 1);
  p.stages = std::move(best);
  return p;
}

std::vector<float> trainSubspaceCentroids(const MatrixRM& x, int d, int clusters, int iters, uint64_t seed,
                                          const KeepGoing& keep_going) {
  const int64_t rows = x.rows(), m = x.cols() / d;
  if (clusters > rows)
    throw Error(
        fmt::format("qet: {} clusters from {} rows (k-means needs at least k points)", clusters, rows));
  std::vector<float> out(std::size_t(m * clusters * d));
  for (int64_t j = 0; j < m; ++j) {
    check(keep_going);
    const std::vector<float> sub = subspaceBlock(x, j, d);
    faiss::ClusteringParameters cp;
    cp.niter = iters;
    cp.seed = int((seed + 7919ull * uint64_t(j)) & 0x7fffffffull);
    cp.verbose = false;
    // Train on every row (no subsampling) and accept few points per centroid without FAISS's warning:
    // k is chosen by the memory budget, up to the number of rows.
    cp.min_points_per_centroid = 1;
    cp.max_points_per_centroid = std::numeric_limits<int>::max() / std::max(1, clusters);
    try {
      faiss::Clustering clustering(d, clusters, cp);
      faiss::IndexFlatL2 index(d);
      clustering.train(rows, sub.data(), index);
      std::copy(clustering.centroids.begin(), clustering.centroids.end(), out.begin() + j * clusters * d);
    } catch (const std::exception& e) {
      throw Error(fmt::format("qet: FAISS k-means of subspace {} ({} rows, k = {}): {}", j, rows, clusters,
                              e.what()));
    }
  }
  return out;
}

std::vector<uint16_t> assignSubspaceCodes(const MatrixRM& x, int d, int clusters,
                                          std::span<const float> centroids) {
  const int64_t rows = x.rows(), m = x.cols() / d;
  std::vector<uint16_t> codes(std::size_t(rows * m));
  std::vector<faiss::Index::idx_t> labels(static_cast<std::size_t>(rows));
  for (int64_t j = 0; j < m; ++j) {
    const std::vector<float> sub = subspaceBlock(x, j, d);
    faiss::IndexFlatL2 index(d);
    index.add(clusters, centroids.data() + j * clusters * d);
    index.assign(rows, sub.data(), labels.data());
    for (int64_t r = 0; r < rows; ++r)
      codes[std::size_t(r * m + j)] = uint16_t(std::max<faiss::Index::idx_t>(labels[std::size_t(r)], 0));
  }
  return codes;
}

MatrixRM reconstructSubspaces(int64_t rows, int64_t cols, int d, int clusters,
                              std::span<const float> centroids, std::span<const uint16_t> codes) {
  const int64_t m = cols / d;
  MatrixRM out(rows, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < m; ++j)
      std::copy_n(centroids.data() + (j * clusters + codes[std::size_t(r * m + j)]) * d, d,
                  out.data() + r * cols + j * d);
  return out;
}

std::shared_ptr<const QetPayload> quantize(const MatrixRM& w, const Config& config, uint64_t seed,
                                           const KeepGoing& keep_going) {
  const int64_t rows = w.rows(), cols = w.cols();
  const int d = config.subspace_width;
  const int64_t m = cols / d;
  const Plan p = plan(rows, cols, config);
  MatrixRM residual = w;
  std::vector<PayloadStage> stages;
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    const StagePlan& sp = p.stages[s];
    Entangled e = entangle(residual, sp.levels);
    const std::vector<float> centroids = trainSubspaceCentroids(
        e.reordered, d, sp.clusters, config.kmeans_iters, seed + 1000003ull * s, keep_going);
    quant::CodebookStage stage = storedCodebook(centroids, m, sp.clusters, d, sp.codebook_bits);
    // Codes are the nearest entries of the codebook as stored (after fp16 / a'-bit rounding).
    stage.codes = assignSubspaceCodes(e.reordered, d, sp.clusters, codebookEntries(stage, m, d));
    auto codebook =
        std::make_shared<const quant::CodebookPayload>(rows, cols, d, std::vector{std::move(stage)});
    if (s + 1 < p.stages.size()) residual -= disentangle(codebook->dequantize(), sp.levels, e.bits);
    PayloadStage ps;
    ps.levels = sp.levels;
    ps.indicators = std::vector<uint32_t>(std::size_t((int64_t(e.bits.size()) + 31) / 32), 0u);
    for (std::size_t i = 0; i < e.bits.size(); ++i)
      if (e.bits[i]) ps.indicators[i / 32] |= 1u << (i % 32);
    ps.codebook = std::move(codebook);
    stages.push_back(std::move(ps));
    check(keep_going);
  }
  return std::make_shared<const QetPayload>(rows, cols, std::move(stages));
}

Reconstruction qetReconstruction(const std::string& name, const MatrixRM& w, const Config& config,
                                 uint64_t seed, const KeepGoing& keep_going) {
  Reconstruction out;
  out.method = name;
  const auto t0 = Clock::now();
  std::shared_ptr<const QetPayload> payload;
  try {
    payload = quantize(w, config, seed, keep_going);
  } catch (const Error& e) {
    out.skipped = true;
    out.note = e.what();
    return out;
  }
  out.quantize_seconds = secondsSince(t0);
  const auto t1 = Clock::now();
  out.w = payload->dequantize();
  out.dequantize_seconds = secondsSince(t1);
  out.bytes = payload->storedBytes();
  std::string ks;
  for (const auto& st : payload->stages())
    ks += fmt::format("{}k={}", ks.empty() ? "" : " ", st.codebook->stages().front().clusters);
  out.note = ks;
  return out;
}

Reconstruction rtnAtBudget(const MatrixRM& w, int64_t budget_bytes) {
  Reconstruction out;
  out.method = "rtn";
  // Widest bits first, then the smallest group (powers of two) whose bytes fit.
  for (int bits : {8, 4, 3, 2}) {
    for (int group = 8; group <= std::max<int64_t>(8, w.cols()); group *= 2) {
      quant::GroupedQuantized probe;
      probe.rows = w.rows();
      probe.cols = w.cols();
      probe.bits = bits;
      probe.group = group;
      probe.scales.resize(std::size_t(probe.rows * probe.groupsPerRow()));
      probe.zeros = probe.scales;
      const int64_t bytes = quant::storedBytes(probe);
      if (bytes > budget_bytes) continue;
      const auto t0 = Clock::now();
      const quant::GroupedQuantized q = quant::quantizeRtn(w, {bits, group});
      out.quantize_seconds = secondsSince(t0);
      const auto t1 = Clock::now();
      out.w = quant::dequantize(q);
      out.dequantize_seconds = secondsSince(t1);
      out.bytes = quant::storedBytes(q);
      out.note = fmt::format("{}-bit, groups of {}", bits, group);
      return out;
    }
  }
  out.skipped = true;
  out.note = "no RTN setting (2, 3, 4, 8 bits with fp16 scale and zero per group) fits the budget";
  return out;
}

Reconstruction rtnGlobalAtBudget(const MatrixRM& w, int64_t budget_bytes) {
  Reconstruction out;
  out.method = "rtn-global";
  const int64_t n = w.size();
  int bits = 0;
  for (int b = 16; b >= 1 && bits == 0; --b)
    if (4 * quant::packedWordCount(n, b) + 8 <= budget_bytes) bits = b;
  if (bits == 0) {
    out.skipped = true;
    out.note = "not even 1 bit per element fits the budget";
    return out;
  }
  const auto t0 = Clock::now();
  const float lo = w.minCoeff(), hi = w.maxCoeff();
  const float top = float((1u << bits) - 1);
  const float step = hi > lo ? (hi - lo) / top : 1.0f;
  std::vector<uint16_t> codes(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    codes[std::size_t(i)] = uint16_t(std::clamp(std::round((w.data()[i] - lo) / step), 0.0f, top));
  out.quantize_seconds = secondsSince(t0);
  const auto t1 = Clock::now();
  out.w.resize(w.rows(), w.cols());
  for (int64_t i = 0; i < n; ++i) out.w.data()[i] = lo + float(codes[std::size_t(i)]) * step;
  out.dequantize_seconds = secondsSince(t1);
  out.bytes = 4 * quant::packedWordCount(n, bits) + 8;
  out.note = fmt::format("{}-bit, one float min and step for the matrix", bits);
  return out;
}

namespace {

// PQ bytes with codebooks stored at `value_bits` per value (the baselines keep them unquantized).
int64_t pqBytes(int64_t rows, int64_t cols, int d, int k, int value_bits) {
  const int64_t m = cols / d;
  return packedCodeBytes(rows * m, codeBits(k)) + (m * k * d * value_bits + 7) / 8;
}

int pqClusters(int64_t rows, int64_t cols, int d, int value_bits, int64_t bytes) {
  const int cap = int(std::min<int64_t>(rows, 65536));
  if (cap < 2 || pqBytes(rows, cols, d, 2, value_bits) > bytes) return 0;
  int lo = 2, hi = cap + 1;
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (pqBytes(rows, cols, d, mid, value_bits) <= bytes ? lo : hi) = mid;
  }
  return lo;
}

// Values as stored at `value_bits` (16: fp16; 32: float).
void roundValues(std::vector<float>& v, int value_bits) {
  if (value_bits <= 16)
    for (float& x : v) x = halfToFloat(floatToHalf(x));
}

}  // namespace

Reconstruction pqAtBudget(const MatrixRM& w, int64_t budget_bytes, int d, int original_bits, int iters,
                          uint64_t seed, const KeepGoing& keep_going) {
  Reconstruction out;
  out.method = "pq";
  if (d <= 0 || w.cols() % d != 0) {
    out.skipped = true;
    out.note = fmt::format("subspace width {} does not divide {} columns", d, w.cols());
    return out;
  }
  const int k = pqClusters(w.rows(), w.cols(), d, original_bits, budget_bytes);
  if (k == 0) {
    out.skipped = true;
    out.note = "not even 2 clusters fit the budget";
    return out;
  }
  const auto t0 = Clock::now();
  std::vector<float> book = trainSubspaceCentroids(w, d, k, iters, seed, keep_going);
  roundValues(book, original_bits);
  const auto codes = assignSubspaceCodes(w, d, k, book);
  out.quantize_seconds = secondsSince(t0);
  const auto t1 = Clock::now();
  out.w = reconstructSubspaces(w.rows(), w.cols(), d, k, book, codes);
  out.dequantize_seconds = secondsSince(t1);
  out.bytes = pqBytes(w.rows(), w.cols(), d, k, original_bits);
  out.note = fmt::format("k={}", k);
  return out;
}

Reconstruction opqAtBudget(const MatrixRM& w, int64_t budget_bytes, int d, int original_bits, int iters,
                           uint64_t seed, const KeepGoing& keep_going) {
  Reconstruction out;
  out.method = "opq";
  const int64_t rows = w.rows(), cols = w.cols();
  const int64_t rotation_bytes = cols * cols * original_bits / 8;
  if (d <= 0 || cols % d != 0) {
    out.skipped = true;
    out.note = fmt::format("subspace width {} does not divide {} columns", d, cols);
    return out;
  }
  const int k = pqClusters(rows, cols, d, original_bits, budget_bytes - rotation_bytes);
  if (k == 0) {
    out.skipped = true;
    out.note = fmt::format("the {}x{} rotation ({} bytes) leaves no room in {} bytes", cols, cols,
                           rotation_bytes, budget_bytes);
    return out;
  }
  const int64_t m = cols / d;
  const auto t0 = Clock::now();
  MatrixRM rotated(rows, cols);
  faiss::OPQMatrix opq(static_cast<int>(cols), static_cast<int>(m));
  opq.verbose = false;
  opq.niter = 25;
  // OPQ's own PQ (power-of-two k for its alternating training) with FAISS's warnings off.
  const int train_bits = std::clamp(int(std::floor(std::log2(double(k)))), 1, 8);
  faiss::ProductQuantizer train_pq(static_cast<size_t>(cols), static_cast<size_t>(m),
                                   static_cast<size_t>(train_bits));
  train_pq.cp.min_points_per_centroid = 1;
  train_pq.cp.verbose = false;
  train_pq.verbose = false;
  opq.pq = &train_pq;
  try {
    opq.train(rows, w.data());
    opq.apply_noalloc(rows, w.data(), rotated.data());
  } catch (const std::exception& e) {
    throw Error(fmt::format("opq: FAISS OPQMatrix training: {}", e.what()));
  }
  check(keep_going);
  std::vector<float> book = trainSubspaceCentroids(rotated, d, k, iters, seed, keep_going);
  roundValues(book, original_bits);
  const auto codes = assignSubspaceCodes(rotated, d, k, book);
  out.quantize_seconds = secondsSince(t0);
  const auto t1 = Clock::now();
  const MatrixRM rec = reconstructSubspaces(rows, cols, d, k, book, codes);
  out.w.resize(rows, cols);
  opq.reverse_transform(rows, rec.data(), out.w.data());
  out.dequantize_seconds = secondsSince(t1);
  out.bytes = rotation_bytes + pqBytes(rows, cols, d, k, original_bits);
  out.note = fmt::format("k={}, rotation {} bytes", k, rotation_bytes);
  return out;
}

MatrixRM syntheticSet(int set, uint64_t seed) {
  const int64_t cols = set == 1 ? 128 : set == 2 ? 512 : set == 3 ? 1024 : 0;
  if (cols == 0) throw Error(fmt::format("qet: synthetic set {} (expected 1, 2 or 3)", set));
  const int64_t rows = 1024;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.5, 0.16);
  std::uniform_real_distribution<double> unit(0.0, 1.0), outlier(-100.0, 100.0);
  MatrixRM x(rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    double v;
    do v = normal(rng);
    while (v < 0.0 || v > 1.0);
    if (unit(rng) < 1e-4) v = outlier(rng);
    x.data()[i] = float(v);
  }
  return x;
}

}  // namespace moewb::methods::qet

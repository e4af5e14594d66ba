// SPDX-License-Identifier: MIT
// `moewb qet [MODEL | FILE.safetensors] [--tensor NAME | --synthetic 1|2|3] [--ratio 2,4,8,16] [--json]
// [--write-reconstruction FILE]`: QET (issue #37), its ablations and the baselines RTN, FAISS PQ and FAISS
// OPQ at equal memory on one matrix; one row per method and ratio with MSE, MAE, the bytes of everything
// stored and the quantization and dequantization time.
#include "moewb/methods/qet.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_progress.h"
#include "command_registry.h"
#include "model_loading.h"
#include "moewb/catalog.h"
#include "moewb/checkpoint.h"
#include "moewb/demo_model.h"
#include "moewb/error.h"
#include "moewb/output_target.h"
#include "moewb/safetensors_writer.h"

namespace moewb::cli {
namespace {

namespace qet = moewb::methods::qet;

struct QetArgs {
  std::string source;  // a model folder, or a .safetensors file holding one 2-D tensor
  std::string tensor;
  int synthetic = 0;
  std::string ratios = "4";
  std::string methods = "qet,qet-vanilla,qet+cqo,qet+rqo,rtn,rtn-global,pq,opq";
  int original_bits = 0;  // 0: 32 for synthetic sets, the stored dtype's bits otherwise
  qet::Config config;
  uint64_t seed = 1;
  int threads = 1;
  bool json = false;
  std::string reconstruction;
  bool force = false;
};

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

struct Matrix {
  std::string name;
  MatrixRM w;
  int stored_bits = 32;
};

Matrix loadMatrix(const QetArgs& a) {
  Matrix m;
  if (a.synthetic) {
    if (!a.tensor.empty() || !a.source.empty())
      throw Error("qet: --synthetic takes no model, file or --tensor");
    m.name = fmt::format("synthetic set {} (seed {})", a.synthetic, a.seed);
    m.w = qet::syntheticSet(a.synthetic, a.seed);
    return m;
  }
  const bool file = a.source.size() > 12 && a.source.ends_with(".safetensors");
  if (file && a.tensor.empty()) {
    const auto ckpt = Checkpoint::open(a.source, interruptCheck());
    std::vector<std::size_t> two_d;
    for (std::size_t i = 0; i < ckpt->tensors().size(); ++i)
      if (ckpt->tensor(i).shape.size() == 2) two_d.push_back(i);
    if (two_d.size() != 1)
      throw Error(fmt::format("qet: {} holds {} 2-D tensors (expected one; name it with --tensor)", a.source,
                              two_d.size()));
    const TensorRecord& t = ckpt->tensor(two_d.front());
    const std::vector<float> v = ckpt->readFloat(two_d.front());
    m.name = fmt::format("{}: {}", a.source, t.name);
    m.w = Eigen::Map<const MatrixRM>(v.data(), t.shape[0], t.shape[1]);
    m.stored_bits = int(dtypeSize(t.dtype) * 8);
    return m;
  }
  if (a.tensor.empty())
    throw Error("qet: name a matrix: --tensor NAME (of MODEL), a .safetensors file, or --synthetic N");
  const auto catalog = openModel(a.source);
  for (const auto& wm : catalog->matrices())
    if (wm.name == a.tensor) {
      m.name = a.tensor;
      m.w = catalog->readMatrix(wm);
      m.stored_bits = int(dtypeSize(catalog->checkpoint().tensor(wm.tensor).dtype) * 8);
      return m;
    }
  throw Error(fmt::format("qet: the model has no weight matrix named '{}' (see `moewb inspect`)", a.tensor));
}

struct Row {
  double ratio = 0;
  qet::Reconstruction r;
  double mse = 0, mae = 0;
};

void runQet(const QetArgs& a) {
  if (!a.reconstruction.empty()) {
    // Before minutes of k-means, not after (moewb/output_target.h); the model is read, never replaced.
    OutputTarget target{a.reconstruction, OutputKind::File, "qet: --write-reconstruction", a.force, {}};
    if (!a.synthetic) target.inputs.emplace_back(a.source.empty() ? resolveModelPath("") : a.source);
    checkOutputTarget(target);
    checkOutputSpace(target, 0);
  }
  const Matrix m = loadMatrix(a);
  const int64_t rows = m.w.rows(), cols = m.w.cols();
  const int original_bits = a.original_bits ? a.original_bits : (a.synthetic ? 32 : m.stored_bits);
  const int64_t original_bytes = rows * cols * original_bits / 8;
  std::vector<double> ratios;
  for (const auto& t : splitList(a.ratios)) {
    char* end = nullptr;
    const double v = std::strtod(t.c_str(), &end);
    if (!end || *end || !(v >= 1))
      throw Error(fmt::format("qet: --ratio '{}' is not a list of numbers >= 1", a.ratios));
    ratios.push_back(v);
  }
  const std::vector<std::string> methods = splitList(a.methods);
  for (const auto& name : methods)
    if (name != "qet" && name != "qet-vanilla" && name != "qet+cqo" && name != "qet+rqo" && name != "rtn" &&
        name != "rtn-global" && name != "pq" && name != "opq")
      throw Error(fmt::format(
          "qet: unknown method '{}' (known: qet, qet-vanilla, qet+cqo, qet+rqo, rtn, rtn-global, pq, opq)",
          name));

  const qet::FaissThreads faiss_threads(a.threads);
  const ProgressFn progress = makeCliProgress("qet");
  const qet::KeepGoing keep_going = [] { return !interrupted(); };
  std::vector<Row> table;
  SafetensorsWriter reconstruction;
  const double steps = double(ratios.size() * methods.size());
  for (double ratio : ratios) {
    const int64_t budget = int64_t(std::floor(double(original_bytes) / ratio));
    for (const auto& name : methods) {
      if (!progress(double(table.size()) / steps, fmt::format("{} at ratio {}", name, ratio)))
        throw Cancelled{};
      qet::Config c = a.config;
      c.ratio = ratio;
      c.original_bits = original_bits;
      if (name == "qet-vanilla" || name == "qet+cqo") c.stages = 1;
      if (name == "qet-vanilla" || name == "qet+rqo") c.codebook_bits = 0;
      Row row;
      row.ratio = ratio;
      if (name.starts_with("qet"))
        row.r = qet::qetReconstruction(name, m.w, c, a.seed, keep_going);
      else if (name == "rtn")
        row.r = qet::rtnAtBudget(m.w, budget);
      else if (name == "rtn-global")
        row.r = qet::rtnGlobalAtBudget(m.w, budget);
      else if (name == "pq")
        row.r =
            qet::pqAtBudget(m.w, budget, c.subspace_width, original_bits, c.kmeans_iters, a.seed, keep_going);
      else
        row.r = qet::opqAtBudget(m.w, budget, c.subspace_width, original_bits, c.kmeans_iters, a.seed,
                                 keep_going);
      throwIfInterrupted();
      if (!row.r.skipped) {
        const Eigen::ArrayXXd diff = (m.w - row.r.w).cast<double>().array();
        row.mse = diff.square().mean();
        row.mae = diff.abs().mean();
        if (name == "qet" && !a.reconstruction.empty())
          reconstruction.addFloat(fmt::format("qet.ratio.{}", ratio), DType::F32, {rows, cols},
                                  std::span<const float>(row.r.w.data(), std::size_t(row.r.w.size())));
      }
      row.r.w.resize(0, 0);
      table.push_back(std::move(row));
    }
  }
  progress(1.0, "done");
  if (!a.reconstruction.empty()) {
    reconstruction.setMetadata({{"source", m.name}, {"method", "qet"}});
    reconstruction.write(a.reconstruction);
  }
  // PQ's MSE at the same ratio, for the "x PQ" column.
  auto pqMse = [&](double ratio) -> double {
    for (const auto& row : table)
      if (row.ratio == ratio && row.r.method == "pq" && !row.r.skipped) return row.mse;
    return 0;
  };
  if (a.json) {
    nlohmann::json j = {{"source", m.name},
                        {"matrix_rows", rows},
                        {"matrix_cols", cols},
                        {"original_bits", original_bits},
                        {"original_bytes", original_bytes},
                        {"rows", nlohmann::json::array()}};
    for (const auto& row : table) {
      nlohmann::json e = {
          {"method", row.r.method}, {"ratio", row.ratio}, {"skipped", row.r.skipped}, {"note", row.r.note}};
      if (!row.r.skipped) {
        const double pq = pqMse(row.ratio);
        e.update({{"mse", row.mse},
                  {"mae", row.mae},
                  {"bytes", row.r.bytes},
                  {"achieved_ratio", double(original_bytes) / double(row.r.bytes)},
                  {"quantize_seconds", row.r.quantize_seconds},
                  {"dequantize_seconds", row.r.dequantize_seconds}});
        if (pq > 0) e["mse_vs_pq"] = row.mse / pq;
      }
      j["rows"].push_back(e);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s [%lld x %lld], original counted at %d bits per element (%lld bytes)\n", m.name.c_str(),
              static_cast<long long>(rows), static_cast<long long>(cols), original_bits,
              static_cast<long long>(original_bytes));
  std::printf("%-12s %6s %13s %11s %9s %8s %8s %8s %8s  %s\n", "method", "ratio", "mse", "mae", "bytes",
              "ratio*", "x PQ", "quant s", "deq s", "note");
  for (const auto& row : table) {
    if (row.r.skipped) {
      std::printf("%-12s %6.3g %13s  skipped: %s\n", row.r.method.c_str(), row.ratio, "", row.r.note.c_str());
      continue;
    }
    const double pq = pqMse(row.ratio);
    std::printf("%-12s %6.3g %13.6g %11.5g %9lld %8.3f %8s %8.3f %8.4f  %s\n", row.r.method.c_str(),
                row.ratio, row.mse, row.mae, static_cast<long long>(row.r.bytes),
                double(original_bytes) / double(row.r.bytes),
                pq > 0 ? fmt::format("{:.4f}", row.mse / pq).c_str() : "-", row.r.quantize_seconds,
                row.r.dequantize_seconds, row.r.note.c_str());
  }
}

const CommandRegistrar registrar("qet", [](CLI::App& root) {
  auto a = std::make_shared<QetArgs>();
  auto* cmd = root.add_subcommand("qet",
                                  "QET (entanglement reorder + PQ) vs its ablations, RTN, FAISS PQ and OPQ "
                                  "at equal memory on one matrix");
  cmd->add_option(
      "source", a->source,
      "Model folder (with --tensor; default: the demo model) or a .safetensors file with one 2-D tensor");
  cmd->add_option("--tensor", a->tensor, "Weight matrix of the model (expert slices: NAME[e])");
  cmd->add_option("--synthetic", a->synthetic,
                  "The QET paper's synthetic set: 1 (1024x128), 2 (1024x512), 3 (1024x1024)")
      ->check(CLI::IsMember({1, 2, 3}));
  cmd->add_option("--ratio", a->ratios, "Compression ratios theta, comma-separated (2,4,8,16)");
  cmd->add_option("--methods", a->methods,
                  "Methods, comma-separated (qet, qet-vanilla, qet+cqo, qet+rqo, rtn, rtn-global, pq, opq)");
  cmd->add_option("--original-bits", a->original_bits,
                  "Bits per element the original is counted at (default: 32 for synthetic sets, else the "
                  "stored dtype)")
      ->check(CLI::IsMember({16, 32}));
  cmd->add_option("--levels", a->config.levels, "Entanglement levels l (default 3)")->check(CLI::Range(0, 6));
  cmd->add_option("--stages", a->config.stages, "QET stages r: first + residual (default 2)")
      ->check(CLI::Range(1, 4));
  cmd->add_option("--memory-split", a->config.first_stage_share,
                  "First stage's share of the memory (default 0.7)")
      ->check(CLI::Range(0.05, 1.0));
  cmd->add_option("--codebook-bits", a->config.codebook_bits, "Codebook bits a' of QET (default 10; 0: fp16)")
      ->check(CLI::Range(0, 16));
  cmd->add_option("--subspace-width", a->config.subspace_width, "Columns per subspace d (default 8)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--kmeans-iters", a->config.kmeans_iters, "FAISS k-means iterations (default 20)")
      ->check(CLI::Range(1, 200));
  cmd->add_option("--seed", a->seed, "Seed of the synthetic set and of k-means");
  cmd->add_option(
         "--threads", a->threads,
         "FAISS's OpenMP threads (default 1: busy-waiting OpenMP threads slow down badly on a loaded "
         "machine; 0: OpenMP's default)")
      ->check(CLI::Range(0, 1024));
  cmd->add_flag("--json", a->json, "Print JSON: one row per method and ratio");
  cmd->add_option(
      "--write-reconstruction", a->reconstruction,
      "Write QET's dequantized matrix (F32, one tensor qet.ratio.THETA per ratio) to this .safetensors file");
  cmd->add_flag("--force", a->force, "Replace an existing --write-reconstruction file (never the model)");
  cmd->callback([a] { runQet(*a); });
});

}  // namespace
}  // namespace moewb::cli

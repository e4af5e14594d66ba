// SPDX-License-Identifier: MIT
#include "moewb/engine/calibration.h"

#include <fmt/format.h>

#include <algorithm>

#include "moewb/error.h"

namespace moewb::engine {

HessianCollector::HessianCollector(const std::vector<std::string>& matrices, int64_t max_tokens)
    : wanted_(matrices.begin(), matrices.end()), max_tokens_(max_tokens) {}

void HessianCollector::onLinearInput(std::string_view matrix, const float* x, int64_t rows, int64_t cols) {
  if (rows <= 0 || !wanted_.count(matrix)) return;
  auto it = hessians_.find(matrix);
  if (it == hessians_.end()) {
    quant::MatrixHessian fresh;
    fresh.cols = cols;
    fresh.h = Eigen::MatrixXd::Zero(cols, cols);
    it = hessians_.emplace(std::string(matrix), std::move(fresh)).first;
  }
  quant::MatrixHessian& m = it->second;
  if (m.cols != cols)
    throw Error(fmt::format("calibration: '{}' was fed {} and then {} input features", matrix, m.cols, cols));
  m.tokens_seen += rows;
  const int64_t take = max_tokens_ > 0 ? std::min(rows, max_tokens_ - m.tokens) : rows;
  if (take <= 0) return;
  // X^T X in float64 from float32 rows: the sum over thousands of tokens must not lose the small
  // eigenvalues GPTQ's Cholesky depends on.
  const Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> xf(x, take, cols);
  const Eigen::MatrixXd xd = xf.cast<double>();
  m.h.selfadjointView<Eigen::Lower>().rankUpdate(xd.transpose(), 2.0);
  m.tokens += take;
}

quant::CalibrationSet HessianCollector::take() {
  // Only the lower triangle was updated.
  for (auto& [name, m] : hessians_) m.h.triangularView<Eigen::StrictlyUpper>() = m.h.transpose();
  return std::move(hessians_);
}

namespace {

// Only the taps matter; logits are not needed.
class SilentObserver final : public ForwardObserver {
 public:
  bool wantsLogits() const override { return false; }
};

}  // namespace

quant::CalibrationSet collectHessians(const MoeEngine& engine, const std::vector<int32_t>& ids,
                                      const std::vector<std::string>& matrices, const CalibrationOptions& options,
                                      const ProgressFn& progress) {
  if (options.seq_len < 2) throw Error(fmt::format("calibration: sequence length {} is below 2", options.seq_len));
  HessianCollector collector(matrices, options.max_tokens);
  const ScopedLinearInputTap tap(&collector);
  SilentObserver observer;
  ProgressReporter reporter(progress ? progress : ProgressFn([](double, std::string_view) { return true; }));
  const int64_t total = static_cast<int64_t>(ids.size());
  const int64_t per_batch = std::max<int64_t>(options.seq_len, options.batch_tokens / options.seq_len * options.seq_len);
  for (int64_t begin = 0; begin < total; begin += per_batch) {
    SequenceBatch batch;
    const int64_t end = std::min(total, begin + per_batch);
    for (int64_t w = begin; w < end; w += options.seq_len)
      batch.add(std::span<const int32_t>(ids.data() + w, static_cast<std::size_t>(std::min<int64_t>(options.seq_len, end - w))));
    engine.forward(batch, observer, &reporter, double(begin) / double(total), double(end - begin) / double(total));
    if (!reporter.report(double(end) / double(total), "calibration")) throw Cancelled{};
  }
  return collector.take();
}

int64_t hessianBytes(const std::vector<int64_t>& input_features) {
  int64_t bytes = 0;
  for (int64_t c : input_features) bytes += c * c * 8;
  return bytes;
}

}  // namespace moewb::engine

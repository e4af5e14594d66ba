// SPDX-License-Identifier: MIT
#include "device_weights.h"

#include <cuda_bf16.h>

#include "engine_kernels.h"
#include "moewb/mapped_pages.h"
#include "moewb/gpu/int3_layout.h"
#include "moewb/quant/model_quantizer.h"

namespace moewb::gpu::device_engine {

void DeviceWeightStore::useProvider(const void* provider_identity) {
  if (provider_identity == provider_) return;
  entries_.clear();
  lru_.clear();
  resident_ = 0;
  provider_ = provider_identity;
}

const DeviceMatrix* DeviceWeightStore::lookup(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  it->second.step = step_;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return &it->second.view;
}

void DeviceWeightStore::makeRoom(uint64_t bytes) {
  if (limit_ == 0) return;
  // Oldest first; entries of the current step stay (the step needs them), even above the limit.
  for (auto it = lru_.end(); resident_ + bytes > limit_ && it != lru_.begin();) {
    --it;
    auto entry = entries_.find(*it);
    if (entry->second.step == step_) continue;
    const uint64_t freed = entry->second.data.bytes() + entry->second.bias.bytes();
    resident_ -= freed;
    evicted_ += freed;
    entries_.erase(entry);
    it = lru_.erase(it);
  }
}

DeviceWeightStore::Rows DeviceWeightStore::read(const engine::WeightProvider& w, const std::string& name,
                                                int64_t rows, int64_t cols) {
  Rows r;
  if (auto* direct = dynamic_cast<const engine::CheckpointWeights*>(&w)) {
    const Checkpoint& ckpt = direct->checkpoint();
    if (auto i = ckpt.find(name)) {
      const TensorRecord& t = ckpt.tensor(*i);
      if (t.dtype == DType::BF16 && t.shape.size() == 2 && (rows < 0 || t.shape[0] == rows) &&
          (cols < 0 || t.shape[1] == cols)) {
        r.bf16 = ckpt.bytes(*i);
        r.rows = t.shape[0];
        r.cols = t.shape[1];
        return r;
      }
    }
  }
  r.keep = w.matrix(name, rows, cols);
  r.f32 = r.keep.data();
  r.rows = r.keep.rows();
  r.cols = r.keep.cols();
  return r;
}

const DeviceMatrix& DeviceWeightStore::insert(const std::string& key, std::vector<Rows>& parts, int64_t cols,
                                              const float* host_bias) {
  int64_t rows = 0;
  for (const Rows& p : parts) rows += p.rows;
  const int64_t count = rows * cols;
  const uint64_t bytes = static_cast<uint64_t>(count) * (bf16_ ? 2 : 4) + (host_bias ? rows * 4 : 0);
  makeRoom(bytes);
  Entry e;
  e.data.grow(static_cast<std::size_t>(count) * (bf16_ ? 2 : 4));
  int64_t row0 = 0;
  for (const Rows& p : parts) {
    const int64_t n = p.rows * cols;
    if (bf16_) {
      auto* dst = e.data.as<__nv_bfloat16>() + row0 * cols;
      if (p.f32) {
        float* staged = scratch<float>(staging_, n);
        cudaCheck(cudaMemcpyAsync(staged, p.f32, n * sizeof(float), cudaMemcpyHostToDevice, stream_),
                  "uploading a weight");
        engine_kernels::toBf16(staged, n, dst, stream_);
      } else {
        cudaCheck(cudaMemcpyAsync(dst, p.bf16.data(), n * 2, cudaMemcpyHostToDevice, stream_), "uploading a weight");
      }
    } else {
      float* dst = e.data.as<float>() + row0 * cols;
      if (p.f32) {
        cudaCheck(cudaMemcpyAsync(dst, p.f32, n * sizeof(float), cudaMemcpyHostToDevice, stream_),
                  "uploading a weight");
      } else {
        auto* staged = scratch<__nv_bfloat16>(staging_, n);
        cudaCheck(cudaMemcpyAsync(staged, p.bf16.data(), n * 2, cudaMemcpyHostToDevice, stream_), "uploading a weight");
        engine_kernels::fromBf16(staged, n, dst, stream_);
      }
    }
    row0 += p.rows;
  }
  if (host_bias) {
    e.bias.grow(static_cast<std::size_t>(rows) * 4);
    cudaCheck(cudaMemcpyAsync(e.bias.as(), host_bias, rows * sizeof(float), cudaMemcpyHostToDevice, stream_),
              "uploading a bias");
  }
  // The host copies are freed when the caller returns: the uploads must be complete by then. The mapped
  // pages of the checkpoint go back to the kernel (they stay in the page cache), so streaming a model larger
  // than memory keeps only what is being uploaded resident.
  cudaCheck(cudaStreamSynchronize(stream_), "uploading a weight");
  for (const Rows& p : parts)
    if (!p.bf16.empty()) releaseMappedPages(p.bf16);
  e.view = {e.data.as(), rows, cols, bf16_, host_bias ? e.bias.as<float>() : nullptr};
  e.step = step_;
  lru_.push_front(key);
  e.lru = lru_.begin();
  resident_ += e.data.bytes() + e.bias.bytes();
  uploaded_ += bytes;
  return entries_.emplace(key, std::move(e)).first->second.view;
}

const DeviceMatrix& DeviceWeightStore::insert(const std::string& key, const float* host, int64_t rows, int64_t cols,
                                              const float* host_bias) {
  std::vector<Rows> parts(1);
  parts[0].f32 = host;
  parts[0].rows = rows;
  return insert(key, parts, cols, host_bias);
}

namespace {

std::vector<uint16_t> halfBits(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) h[i] = floatToHalfBits(v[i]);
  return h;
}

template <typename T>
void put(DeviceBuffer& b, const std::vector<T>& host, cudaStream_t stream) {
  b.grow(std::max<std::size_t>(host.size(), 1) * sizeof(T));
  cudaCheck(cudaMemcpyAsync(b.as(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream),
            "uploading a W3A16 weight");
}

// Why the W3A16 kernel cannot run a stored form ("" when it can).
std::string int3Unsupported(const quant::QuantizedMatrix& q) {
  const auto& b = q.base;
  if (q.payload) return "its payload is not grouped integer codes";
  if (b.bits != 3 || b.group != 64) return fmt::format("{}-bit codes in groups of {} (the kernel: 3-bit, 64)", b.bits, b.group);
  if (!w3a16ShapeSupported(b.rows, b.cols)) return fmt::format("shape {}x{} is not a multiple of 64", b.rows, b.cols);
  if (b.zeros.size() != b.scales.size()) return "no zero points";
  if (q.u || q.v) {
    if (!q.u || !q.v) return "one compensator factor without the other";
    if (q.u->format != quant::CompensatorFormat::Int3 || q.v->format != quant::CompensatorFormat::Int3)
      return fmt::format("{} compensators (the fused kernel runs INT3 ones)", compensatorFormatName(q.u->format));
    if (q.rank % 16 != 0 || q.rank > 128) return fmt::format("compensator rank {} (a multiple of 16 up to 128)", q.rank);
  }
  return {};
}

}  // namespace

const DeviceMatrix* DeviceWeightStore::insertInt3(const std::string& key, const quant::QuantizedMatrix& q,
                                                  std::string* why) {
  *why = int3Unsupported(q);
  if (!why->empty()) return nullptr;
  const auto& b = q.base;
  const int64_t n = b.rows, k = b.cols;
  std::vector<uint32_t> words(static_cast<std::size_t>(int3Words(n, k)));
  std::vector<uint16_t> scales(static_cast<std::size_t>(groupCount(n, k))), zero_bias(scales.size());
  const auto s16 = halfBits(b.scales), z16 = halfBits(b.zeros);
  if (Status st = packCodesToW3A16(b.codes.data(), s16.data(), z16.data(), n, k, words.data(), scales.data(),
                                   zero_bias.data(), W3A16Type::Bf16);
      !st.ok()) {
    *why = st.message;
    return nullptr;
  }
  Entry e;
  put(e.packed, words, stream_);
  put(e.scales, scales, stream_);
  put(e.zero_bias, zero_bias, stream_);
  e.int3 = {e.packed.as(), e.scales.as(), e.zero_bias.as(), n, k, W3A16Type::Bf16};
  if (q.u) {
    const int64_t pad = (q.rank + 63) / 64 * 64;
    std::vector<uint32_t> uw(static_cast<std::size_t>(int3Words(n, pad))), vw(static_cast<std::size_t>(int3Words(pad, k)));
    std::vector<uint16_t> us(static_cast<std::size_t>(groupCount(n, pad))), vs(static_cast<std::size_t>(groupCount(pad, k)));
    if (Status st = packInt3FactorToW3A16(q.u->codes.data(), q.u->scales.data(), n, q.rank, q.u->group, n, pad,
                                          W3A16Type::Bf16, uw.data(), us.data());
        !st.ok()) {
      *why = "its U factor: " + st.message;
      return nullptr;
    }
    if (Status st = packInt3FactorToW3A16(q.v->codes.data(), q.v->scales.data(), q.rank, k, q.v->group, pad, k,
                                          W3A16Type::Bf16, vw.data(), vs.data());
        !st.ok()) {
      *why = "its V factor: " + st.message;
      return nullptr;
    }
    put(e.u_packed, uw, stream_);
    put(e.u_scales, us, stream_);
    put(e.v_packed, vw, stream_);
    put(e.v_scales, vs, stream_);
    e.compensator.rank = q.rank;
    e.compensator.u3 = {e.u_packed.as(), e.u_scales.as(), nullptr, n, pad, W3A16Type::Bf16};
    e.compensator.v3 = {e.v_packed.as(), e.v_scales.as(), nullptr, pad, k, W3A16Type::Bf16};
  }
  cudaCheck(cudaStreamSynchronize(stream_), "uploading a W3A16 weight");
  uint64_t bytes = 0;
  for (const DeviceBuffer* d : {&e.packed, &e.scales, &e.zero_bias, &e.u_packed, &e.u_scales, &e.v_packed, &e.v_scales})
    bytes += d->bytes();
  makeRoom(bytes);
  e.step = step_;
  lru_.push_front(key);
  e.lru = lru_.begin();
  resident_ += bytes;
  uploaded_ += bytes;
  auto& stored = entries_.emplace(key, std::move(e)).first->second;
  stored.view = {nullptr, n, k, true, nullptr, &stored.int3, q.u ? &stored.compensator : nullptr};
  ++native_int3_count_;
  return &stored.view;
}

const DeviceMatrix& DeviceWeightStore::matrix(const engine::WeightProvider& w, const std::string& name, int64_t rows,
                                              int64_t cols, const std::string& bias_name) {
  if (auto* hit = lookup(name)) return *hit;
  if (auto q = w.storedForm(name)) {
    std::string why = native_int3_ ? std::string{} : "the float32 mode runs dequantized weights";
    if (native_int3_ && bias_name.empty())
      if (const DeviceMatrix* native = insertInt3(name, *q, &why)) return *native;
    if (native_int3_ && !bias_name.empty()) why = "a biased projection";
    ++dequantized_count_;
    if (dequantized_reason_.empty()) dequantized_reason_ = fmt::format("{}: {}", name, why);
  }
  std::vector<Rows> parts;
  parts.push_back(read(w, name, rows, cols));
  std::vector<float> bias;
  if (!bias_name.empty()) bias = w.vector(bias_name, parts[0].rows);
  const int64_t actual_cols = parts[0].cols;
  return insert(name, parts, actual_cols, bias.empty() ? nullptr : bias.data());
}

const DeviceMatrix& DeviceWeightStore::stacked(const engine::WeightProvider& w, const std::string& key,
                                               const std::vector<std::string>& names, int64_t rows_each,
                                               int64_t cols) {
  if (auto* hit = lookup(key)) return *hit;
  std::vector<Rows> parts;
  for (const auto& name : names) parts.push_back(read(w, name, rows_each, cols));
  return insert(key, parts, cols, nullptr);
}

const float* DeviceWeightStore::vector(const engine::WeightProvider& w, const std::string& name, int64_t length) {
  const std::string key = "vector:" + name;
  if (auto it = entries_.find(key); it != entries_.end()) {
    it->second.step = step_;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return it->second.data.as<float>();
  }
  const std::vector<float> v = w.vector(name, length);
  Entry e;
  e.data.grow(v.size() * sizeof(float));
  cudaCheck(cudaMemcpyAsync(e.data.as(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice, stream_),
            "uploading a vector");
  cudaCheck(cudaStreamSynchronize(stream_), "uploading a vector");
  e.view = {e.data.as(), 1, static_cast<int64_t>(v.size()), false, nullptr};
  e.step = step_;
  lru_.push_front(key);
  e.lru = lru_.begin();
  resident_ += e.data.bytes();
  uploaded_ += e.data.bytes();
  return entries_.emplace(key, std::move(e)).first->second.data.as<float>();
}

}  // namespace moewb::gpu::device_engine

// SPDX-License-Identifier: MIT
#include "moewb/quant/export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "moewb/atomic_file.h"
#include "moewb/dtype.h"
#include "moewb/error.h"
#include "moewb/methods/registry.h"
#include "moewb/output_target.h"
#include "moewb/quant/int3_pack.h"
#include "moewb/quant/payload.h"
#include "moewb/safetensors_writer.h"

namespace moewb::quant {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormatName = "moewb-compressed";
constexpr int kFormatVersion = 1;

template <typename T>
std::span<const std::byte> asBytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v.data(), v.size()));
}

// Codes of 2, 4 or 8 bits: 32/bits codes per little-endian uint32, code i of a word in bits [bits*i, ...).
std::vector<uint32_t> packCodes(const std::vector<uint8_t>& codes, int bits, int64_t* padding) {
  if (bits == 3) {
    PackedInt3 p = packInt3(codes);
    *padding = p.padding;
    return std::move(p.words);
  }
  const int64_t per_word = 32 / bits, n = int64_t(codes.size());
  const int64_t words = (n + per_word - 1) / per_word;
  *padding = words * per_word - n;
  std::vector<uint32_t> out(std::size_t(words), 0u);
  for (int64_t i = 0; i < n; ++i)
    out[std::size_t(i / per_word)] |= uint32_t(codes[std::size_t(i)]) << (bits * (i % per_word));
  return out;
}

std::vector<uint8_t> unpackCodes(std::span<const uint32_t> words, int64_t count, int bits) {
  if (bits == 3) return unpackInt3(words, count);
  const int64_t per_word = 32 / bits;
  if (int64_t(words.size()) * per_word < count) throw Error("packed codes are shorter than the matrix");
  std::vector<uint8_t> out(static_cast<std::size_t>(count));
  const uint32_t mask = (1u << bits) - 1u;
  for (int64_t i = 0; i < count; ++i)
    out[std::size_t(i)] = uint8_t((words[std::size_t(i / per_word)] >> (bits * (i % per_word))) & mask);
  return out;
}

// Groups the writer's tensors into shards of at most max_shard_bytes each.
class ShardedWriter {
 public:
  explicit ShardedWriter(uint64_t max_bytes) : max_bytes_(max_bytes) { shards_.emplace_back(); }
  SafetensorsWriter& next(uint64_t incoming) {
    if (shards_.back().size() > 0 && shards_.back().dataBytes() + incoming > max_bytes_)
      shards_.emplace_back();
    return shards_.back();
  }
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape,
           std::span<const std::byte> data) {
    next(data.size()).add(name, dtype, std::move(shape), data);
    names_.push_back({name, shards_.size() - 1});
  }
  void addHalf(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
    next(values.size() * 2).addFloat(name, DType::F16, std::move(shape), values);
    names_.push_back({name, shards_.size() - 1});
  }
  // Writes the shards and the index; returns total data bytes.
  uint64_t write(const fs::path& dir) {
    const std::size_t n = shards_.size();
    nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
    uint64_t total = 0;
    std::vector<std::string> files;
    for (std::size_t i = 0; i < n; ++i) {
      files.push_back(n == 1 ? std::string("model.safetensors")
                             : fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n));
      shards_[i].write(dir / files.back());
      total += shards_[i].dataBytes();
    }
    for (const auto& [name, shard] : names_) index["weight_map"][name] = files[shard];
    index["metadata"]["total_size"] = total;
    if (n > 1) writeFileAtomically(dir / "model.safetensors.index.json", index.dump(2));
    return total;
  }

 private:
  uint64_t max_bytes_;
  std::vector<SafetensorsWriter> shards_;
  std::vector<std::pair<std::string, std::size_t>> names_;
};

void copySideFiles(const Checkpoint& ckpt, const fs::path& out_dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(ckpt.root(), ec)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    const std::string ext = entry.path().extension().string();
    const bool side = (ext == ".json" || ext == ".model" || ext == ".txt" || ext == ".jinja") &&
                      name.find(".index.json") == std::string::npos && name != "manifest.json";
    if (side) fs::copy_file(entry.path(), out_dir / name, fs::copy_options::overwrite_existing);
  }
}

struct ProgressStep {
  ProgressReporter reporter;
  explicit ProgressStep(const ProgressFn& fn)
      : reporter(fn ? fn : ProgressFn([](double, std::string_view) { return true; })) {}
  void operator()(double f, const std::string& stage) {
    if (!reporter.report(f, stage)) throw Cancelled{};
  }
};

// Which tensors have quantized matrices, and whether all of their matrices are quantized.
std::map<std::size_t, std::vector<const QuantizedMatrix*>> byTensor(const ModelQuantization& q) {
  std::map<std::size_t, std::vector<const QuantizedMatrix*>> m;
  for (const auto& qm : q.matrices) m[qm.source.tensor].push_back(&qm);
  return m;
}

// How many matrices each tensor holds (an expert-stacked tensor holds several), counted once for the
// whole export: counting per tensor was quadratic in the tensor count.
std::vector<std::size_t> matricesPerTensor(const ModelCatalog& catalog) {
  std::vector<std::size_t> count(catalog.checkpoint().tensors().size(), 0);
  for (const auto& m : catalog.matrices()) ++count.at(m.tensor);
  return count;
}

void addFactor(ShardedWriter& w, const std::string& key, const QuantizedFactor& f) {
  switch (f.format) {
    case CompensatorFormat::Int3: {
      const PackedInt3 p = packInt3(f.codes);
      w.add(key + ".qweight", DType::U32, {int64_t(p.words.size())}, asBytes(p.words));
      w.addHalf(key + ".scales", {f.groups()}, f.scales);
      break;
    }
    case CompensatorFormat::Int8: {
      std::vector<int8_t> q(f.codes.size());
      for (std::size_t i = 0; i < q.size(); ++i) q[i] = int8_t(int(f.codes[i]) - 128);
      w.add(key + ".qweight", DType::I8, {f.rows, f.cols}, asBytes(q));
      w.addHalf(key + ".scales", {f.groups()}, f.scales);
      break;
    }
    case CompensatorFormat::Fp16:
      w.addHalf(key + ".weight", {f.rows, f.cols}, f.values);
      break;
    case CompensatorFormat::Fp32:
      w.add(key + ".weight", DType::F32, {f.rows, f.cols}, asBytes(f.values));
      break;
  }
}

// Where payloads write their tensors: the export's shards, plus the shared objects (a dictionary) written
// once each and listed in the manifest's top-level "shared" with the bytes their tensors hold.
class ExportPayloadWriter final : public PayloadWriter {
 public:
  ExportPayloadWriter(ShardedWriter& writer, nlohmann::json& manifest)
      : writer_(writer), manifest_(manifest) {}
  void addTensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                 std::span<const std::byte> data) override {
    written_ += int64_t(data.size());
    writer_.add(name, dtype, std::move(shape), data);
  }
  void addHalf(const std::string& name, std::vector<int64_t> shape, std::span<const float> values) override {
    written_ += 2 * int64_t(values.size());
    writer_.addHalf(name, std::move(shape), std::vector<float>(values.begin(), values.end()));
  }
  std::string sharedTensor(const void* identity, const std::string& name_hint,
                           const SharedWriteFn& write) override {
    if (const auto it = shared_names_.find(identity); it != shared_names_.end()) return it->second;
    std::string name;
    for (int n = 0; name.empty() || used_names_.count(name); ++n) name = fmt::format("{}.{}", name_hint, n);
    used_names_.insert(name);
    shared_names_.emplace(identity, name);
    const int64_t before = written_;
    write(*this, name);
    shared_written_ += written_ - before;
    if (!manifest_.contains("shared")) manifest_["shared"] = nlohmann::json::object();
    manifest_["shared"][name] = {{"bytes", written_ - before}};
    return name;
  }
  // Bytes written outside shared objects.
  int64_t ownBytesWritten() const { return written_ - shared_written_; }

 private:
  ShardedWriter& writer_;
  nlohmann::json& manifest_;
  std::map<const void*, std::string> shared_names_;
  std::set<std::string> used_names_;
  int64_t written_ = 0, shared_written_ = 0;
};

// Payload tensors of an export, with errors naming the shard file and the tensor.
class ExportPayloadSource final : public PayloadSource {
 public:
  ExportPayloadSource(const Checkpoint& ckpt, const fs::path& dir, SharedPayloadObjects& shared)
      : ckpt_(ckpt), dir_(dir), shared_(shared) {}
  bool has(const std::string& tensor) const override { return ckpt_.find(tensor).has_value(); }
  DType dtype(const std::string& tensor) const override { return record(tensor).dtype; }
  std::vector<int64_t> shape(const std::string& tensor) const override { return record(tensor).shape; }
  std::span<const std::byte> bytes(const std::string& tensor, DType dtype) const override {
    const TensorRecord& rec = record(tensor);
    if (rec.dtype != dtype)
      fail(tensor, fmt::format("expected dtype {}, found {}", dtypeName(dtype), dtypeName(rec.dtype)));
    return ckpt_.bytes(*ckpt_.find(tensor));
  }
  std::vector<float> floats(const std::string& tensor) const override {
    const TensorRecord& rec = record(tensor);
    if (!isFloatingPoint(rec.dtype))
      fail(tensor, fmt::format("expected floating-point values, found {}", dtypeName(rec.dtype)));
    return ckpt_.readFloat(*ckpt_.find(tensor));
  }
  std::string describe(const std::string& tensor) const override {
    const auto i = ckpt_.find(tensor);
    if (!i) return fmt::format("{}: tensor '{}'", dir_.string(), tensor);
    return fmt::format("{}: tensor '{}'", ckpt_.files().at(std::size_t(ckpt_.tensor(*i).file)), tensor);
  }
  SharedPayloadObjects& sharedObjects() const override { return shared_; }

 private:
  const TensorRecord& record(const std::string& tensor) const {
    const auto i = ckpt_.find(tensor);
    if (!i)
      throw Error(fmt::format("{}: tensor '{}' listed in manifest.json is missing", dir_.string(), tensor));
    return ckpt_.tensor(*i);
  }
  const Checkpoint& ckpt_;
  fs::path dir_;
  SharedPayloadObjects& shared_;
};

// What the method said about this matrix: a fallback ("rtn: no calibration token reached this matrix")
// and its own measurements, only when there are any (older readers ignore both).
void addMethodReport(nlohmann::json& entry, const QuantizedMatrix& q) {
  if (!q.fallback.empty()) entry["fallback"] = q.fallback;
  if (!q.measures.empty()) entry["measures"] = q.measures;
}

// A matrix stored as a payload: its tensors, and its entry with "payload": KIND.
nlohmann::json writePayloadMatrix(ExportPayloadWriter& writer, const Checkpoint& ckpt,
                                  const QuantizedMatrix& q) {
  const MatrixPayload& p = *q.payload;
  const std::string& key = q.source.name;
  if (q.u || q.v || !q.base.codes.empty())
    throw Error(
        fmt::format("export: '{}' has a {} payload and grouped codes or compensators besides (a payload "
                    "holds everything a matrix stores)",
                    key, p.kind()));
  if (p.rows() != q.source.rows || p.cols() != q.source.cols)
    throw Error(fmt::format("export: the {} payload of '{}' is {}x{}, the matrix {}x{}", p.kind(), key,
                            p.rows(), p.cols(), q.source.rows, q.source.cols));
  nlohmann::json entry = nlohmann::json::object();
  const int64_t before = writer.ownBytesWritten();
  p.write(writer, key, entry);
  // storedBytes() is what size reports and budgets count: it must be what the export holds.
  if (writer.ownBytesWritten() - before != p.storedBytes())
    throw Error(fmt::format("export: the {} payload of '{}' wrote {} bytes of tensors but counts {}",
                            p.kind(), key, writer.ownBytesWritten() - before, p.storedBytes()));
  entry.update({{"payload", std::string(p.kind())},
                {"rel_error", q.rel_error},
                {"rank", q.rank},
                {"bytes", p.storedBytes()},
                {"rows", p.rows()},
                {"cols", p.cols()},
                {"tensor", ckpt.tensor(q.source.tensor).name},
                {"slice", q.source.slice},
                {"method", q.method},
                {"kurtosis", q.kurtosis},
                {"original_bytes", q.original_bytes},
                {"compensator_bytes", q.compensator_bytes}});
  addMethodReport(entry, q);
  return entry;
}

// The rule of moewb/output_target.h, checked again where the export is written: callers that did not
// check before their work (the GUI's export of a finished run, tests) get it too.
void checkExportTarget(const Checkpoint& ckpt, const fs::path& out_dir, const ExportOptions& options) {
  OutputTarget target;
  target.path = out_dir;
  target.option = "export: --out";
  target.replace = options.replace_existing;
  target.inputs = exportInputs(ckpt);
  checkOutputTarget(target);
}

}  // namespace

std::vector<fs::path> exportInputs(const Checkpoint& ckpt) {
  std::vector<fs::path> inputs{ckpt.root()};
  for (const std::string& file : ckpt.files()) inputs.emplace_back(file);
  return inputs;
}

uint64_t predictedExportBytes(const ModelCatalog& catalog, const std::vector<std::size_t>& matrices,
                              const std::vector<int>& ranks, const QuantizeSettings& settings, bool dequantized) {
  if (!dequantized) return uint64_t(std::max<int64_t>(0, previewPolicy(catalog, matrices, ranks, settings).compressed_bytes));
  // Quantized matrices come back as bf16, everything else as it was.
  int64_t bytes = int64_t(catalog.checkpoint().totalBytes());
  for (std::size_t i : matrices) {
    const WeightMatrix& m = catalog.matrices().at(i);
    bytes += m.rows * m.cols * (2 - int64_t(dtypeSize(catalog.checkpoint().tensor(m.tensor).dtype)));
  }
  return uint64_t(std::max<int64_t>(0, bytes));
}

void writeCompressedModel(const ModelCatalog& catalog, const ModelQuantization& quantization,
                          const fs::path& out_dir, const ExportOptions& options, const ProgressFn& progress) {
  ProgressStep step(progress);
  const Checkpoint& ckpt = catalog.checkpoint();
  checkExportTarget(ckpt, out_dir, options);
  StagingDirectory staging(out_dir);
  ShardedWriter writer(options.max_shard_bytes);
  nlohmann::json manifest = {{"format", kFormatName},
                             {"version", kFormatVersion},
                             {"source", ckpt.root()},
                             {"model_type", catalog.modelType()},
                             {"method", quantization.settings.method},
                             {"settings", methods::weightMethod(quantization.settings.method, "export")
                                              .settingsJson(quantization.settings)},
                             {"policy", quantization.policy},
                             {"original_bytes", quantization.original_bytes},
                             {"compressed_bytes", quantization.compressed_bytes},
                             {"tensors", nlohmann::json::object()},
                             {"copied", nlohmann::json::array()}};
  const std::size_t total = quantization.matrices.size() + ckpt.tensors().size();
  std::size_t done = 0;
  ExportPayloadWriter payload_writer(writer, manifest);
  for (const auto& q : quantization.matrices) {
    step(double(done++) / double(total), fmt::format("writing {}", q.source.name));
    const std::string& key = q.source.name;
    if (q.payload) {
      manifest["tensors"][key] = writePayloadMatrix(payload_writer, ckpt, q);
      continue;
    }
    int64_t padding = 0;
    const std::vector<uint32_t> words = packCodes(q.base.codes, q.base.bits, &padding);
    writer.add(key + ".qweight", DType::U32, {int64_t(words.size())}, asBytes(words));
    writer.addHalf(key + ".scales", {q.base.rows, q.base.groupsPerRow()}, q.base.scales);
    writer.addHalf(key + ".zeros", {q.base.rows, q.base.groupsPerRow()}, q.base.zeros);
    nlohmann::json entry = {{"rel_error", q.rel_error},
                            {"rank", q.rank},
                            {"bits", q.base.bits},
                            {"bytes", q.bytes},
                            {"group", q.base.group},
                            {"rows", q.base.rows},
                            {"cols", q.base.cols},
                            {"padding", padding},
                            {"tensor", ckpt.tensor(q.source.tensor).name},
                            {"slice", q.source.slice},
                            {"method", q.method},
                            {"kurtosis", q.kurtosis},
                            {"original_bytes", q.original_bytes},
                            {"compensator_bytes", q.compensator_bytes}};
    if (q.u && q.v) {
      addFactor(writer, key + ".lora_u", *q.u);
      addFactor(writer, key + ".lora_v", *q.v);
      entry["compensator"] = compensatorFormatName(q.u->format);
      entry["compensator_group"] = q.u->group;
      entry["iterations"] = q.curve.size();
    }
    addMethodReport(entry, q);
    manifest["tensors"][key] = entry;
  }
  const auto quantized = byTensor(quantization);
  const std::vector<std::size_t> matrices_in = matricesPerTensor(catalog);
  for (std::size_t t = 0; t < ckpt.tensors().size(); ++t) {
    const auto it = quantized.find(t);
    if (it != quantized.end() && matrices_in[t] == it->second.size()) continue;  // wholly quantized
    const TensorRecord& rec = ckpt.tensor(t);
    step(double(done++) / double(total), fmt::format("copying {}", rec.name));
    writer.add(rec.name, rec.dtype, rec.shape, ckpt.bytes(t));
    manifest["copied"].push_back(rec.name);
  }
  step(0.99, "writing shards");
  writer.write(staging.path());
  copySideFiles(ckpt, staging.path());
  writeFileAtomically(staging.path() / "manifest.json", manifest.dump(2));
  step(1.0, "committing");
  staging.commit();
}

// True when `scale_name` ("W_scale_inv" / "W_scale") belongs to a weight W that was quantized.
template <typename QuantizedByTensor>
bool scalesQuantizedWeight(const Checkpoint& ckpt, const std::string& scale_name, const QuantizedByTensor& quantized) {
  for (std::string_view suffix : {"_scale_inv", "_scale"}) {
    if (scale_name.size() <= suffix.size() || !scale_name.ends_with(suffix)) continue;
    auto weight = ckpt.find(scale_name.substr(0, scale_name.size() - suffix.size()));
    return weight && quantized.count(*weight) > 0;
  }
  return false;
}

void writeDequantizedModel(const ModelCatalog& catalog, const ModelQuantization& quantization,
                           const fs::path& out_dir, const ExportOptions& options, const ProgressFn& progress) {
  ProgressStep step(progress);
  const Checkpoint& ckpt = catalog.checkpoint();
  checkExportTarget(ckpt, out_dir, options);
  StagingDirectory staging(out_dir);
  const auto quantized = byTensor(quantization);
  std::map<int, std::vector<std::size_t>> by_file;
  for (std::size_t t = 0; t < ckpt.tensors().size(); ++t) by_file[ckpt.tensor(t).file].push_back(t);
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total_size = 0;
  std::size_t done = 0;
  for (auto& [file, tensors] : by_file) {
    std::sort(tensors.begin(), tensors.end(),
              [&](std::size_t a, std::size_t b) { return ckpt.tensor(a).offset < ckpt.tensor(b).offset; });
    SafetensorsWriter writer;
    const std::string file_name = fs::path(ckpt.files().at(std::size_t(file))).filename().string();
    for (std::size_t t : tensors) {
      const TensorRecord& rec = ckpt.tensor(t);
      step(double(done++) / double(ckpt.tensors().size()), fmt::format("writing {}", rec.name));
      // An FP8 weight is written de-scaled in bf16, so its scale companion must not come along.
      if (catalog.classOf(t).is_scale && scalesQuantizedWeight(ckpt, rec.name, quantized)) continue;
      weight_map[rec.name] = file_name;
      const auto it = quantized.find(t);
      if (it == quantized.end()) {
        writer.add(rec.name, rec.dtype, rec.shape, ckpt.bytes(t));
        continue;
      }
      std::vector<float> values = ckpt.readFloat(t);
      const std::byte* start = ckpt.bytes(t).data();
      for (const QuantizedMatrix* q : it->second) {
        const MatrixRM w = dequantize(*q);
        const ModelCatalog::RawView view = catalog.rawView(q->source);
        const int64_t base = int64_t((view.data - start) / std::ptrdiff_t(dtypeSize(view.dtype)));
        for (int64_t r = 0; r < w.rows(); ++r)
          for (int64_t c = 0; c < w.cols(); ++c)
            values[std::size_t(base + r * view.row_stride + c * view.col_stride)] = w(r, c);
      }
      writer.addFloat(rec.name, DType::BF16, rec.shape, values);
    }
    total_size += writer.dataBytes();
    writer.write(staging.path() / file_name);
  }
  // Always an index, even for one shard: its "moewb_export" marks the folder as a moewb export, which
  // a later --force may replace (moewb/output_target.h); Hugging Face reads the index or the lone shard.
  nlohmann::json index = {{"metadata", {{"total_size", total_size}, {"moewb_export", "dequantized"}}},
                          {"weight_map", weight_map}};
  writeFileAtomically(staging.path() / "model.safetensors.index.json", index.dump(2));
  copySideFiles(ckpt, staging.path());
  step(1.0, "committing");
  staging.commit();
}

std::shared_ptr<CompressedModel> CompressedModel::open(const fs::path& dir) {
  auto m = std::shared_ptr<CompressedModel>(new CompressedModel());
  m->dir_ = dir;
  const fs::path manifest_path = dir / "manifest.json";
  std::ifstream in(manifest_path);
  if (!in) throw Error(fmt::format("{}: no manifest.json (not a moewb compressed export)", dir.string()));
  try {
    m->manifest_ = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: invalid JSON ({})", manifest_path.string(), e.what()));
  }
  if (m->manifest_.value("format", "") != kFormatName || !m->manifest_.contains("tensors"))
    throw Error(fmt::format("{}: expected \"format\": \"{}\" and a \"tensors\" object",
                            manifest_path.string(), kFormatName));
  m->ckpt_ = Checkpoint::open(dir.string());
  return m;
}

std::vector<std::string> CompressedModel::quantizedNames() const {
  std::vector<std::string> names;
  for (const auto& [k, v] : manifest_.at("tensors").items()) names.push_back(k);
  return names;
}

QuantizedMatrix CompressedModel::read(const std::string& name) const {
  if (!isQuantized(name))
    throw Error(fmt::format("{}: '{}' is not a quantized tensor of this export", dir_.string(), name));
  const auto& e = manifest_.at("tensors").at(name);
  auto tensorIndex = [&](const std::string& tname) {
    const auto i = ckpt_->find(tname);
    if (!i)
      throw Error(fmt::format("{}: tensor '{}' listed in manifest.json is missing", dir_.string(), tname));
    return *i;
  };
  auto words = [&](const std::string& tname) {
    const auto bytes = ckpt_->bytes(tensorIndex(tname));
    std::vector<uint32_t> w(bytes.size() / 4);
    std::memcpy(w.data(), bytes.data(), w.size() * 4);
    return w;
  };
  auto floats = [&](const std::string& tname) { return ckpt_->readFloat(tensorIndex(tname)); };
  QuantizedMatrix q;
  q.source.name = name;
  q.source.rows = e.at("rows").get<int64_t>();
  q.source.cols = e.at("cols").get<int64_t>();
  q.source.slice = e.value("slice", -1);
  // Exports written before manifests named each tensor's method were HQQ's.
  q.method = e.value("method", std::string("hqq"));
  q.rank = e.value("rank", 0);
  q.rel_error = e.value("rel_error", 0.0);
  q.bytes = e.value("bytes", int64_t(0));
  q.kurtosis = e.value("kurtosis", 0.0);
  q.original_bytes = e.value("original_bytes", int64_t(0));
  q.compensator_bytes = e.value("compensator_bytes", int64_t(0));
  q.fallback = e.value("fallback", std::string());
  if (e.contains("measures") && e.at("measures").is_object())
    for (const auto& [k, v] : e.at("measures").items())
      if (v.is_number()) q.measures[k] = v.get<double>();
  if (e.contains("payload")) {
    // Stored by its payload kind, which says all there is to read: the method is a label here, so an
    // export of a method this build lacks still reads (and evaluates) when its payload kind is known.
    const ExportPayloadSource source(*ckpt_, dir_, *shared_);
    q.payload = readPayload(source, name, e);
    if (q.payload->rows() != q.source.rows || q.payload->cols() != q.source.cols)
      throw Error(fmt::format("{}: the {} payload of '{}' is {}x{}, its manifest entry says {}x{}",
                              dir_.string(), q.payload->kind(), name, q.payload->rows(), q.payload->cols(),
                              q.source.rows, q.source.cols));
    return q;
  }
  const methods::WeightMethod* method = methods::MethodRegistry::instance().find(q.method);
  if (!method)
    throw Error(fmt::format("{}: '{}' was made by method '{}', which this build does not know (known: {})",
                            dir_.string(), name, q.method, methods::MethodRegistry::instance().namesText()));
  if (method->payloadKind() != methods::PayloadKind::GroupedCodes)
    throw Error(fmt::format("{}: '{}': method '{}' stores no grouped codes", dir_.string(), name, q.method));
  GroupedQuantized& b = q.base;
  b.rows = q.source.rows;
  b.cols = q.source.cols;
  b.bits = e.at("bits").get<int>();
  b.group = e.at("group").get<int>();
  b.codes = unpackCodes(words(name + ".qweight"), b.rows * b.cols, b.bits);
  b.scales = floats(name + ".scales");
  b.zeros = floats(name + ".zeros");
  if (int64_t(b.scales.size()) != b.rows * b.groupsPerRow() || b.zeros.size() != b.scales.size())
    throw Error(fmt::format("{}: scales/zeros of '{}' do not match its {}x{} shape and group {}",
                            dir_.string(), name, b.rows, b.cols, b.group));
  if (q.rank > 0) {
    const auto format = parseCompensatorFormat(e.value("compensator", "int3"));
    if (!format) throw Error(fmt::format("{}: unknown compensator format for '{}'", dir_.string(), name));
    const int group = e.value("compensator_group", 64);
    auto readFactor = [&](const std::string& key, int64_t rows, int64_t cols) {
      QuantizedFactor f;
      f.rows = rows;
      f.cols = cols;
      f.format = *format;
      f.group = group;
      switch (*format) {
        case CompensatorFormat::Int3:
          f.codes = unpackInt3(words(key + ".qweight"), rows * cols);
          f.scales = floats(key + ".scales");
          break;
        case CompensatorFormat::Int8: {
          const auto bytes = ckpt_->bytes(tensorIndex(key + ".qweight"));
          f.codes.resize(bytes.size());
          for (std::size_t i = 0; i < bytes.size(); ++i) f.codes[i] = uint8_t(int(int8_t(bytes[i])) + 128);
          f.scales = floats(key + ".scales");
          break;
        }
        case CompensatorFormat::Fp16:
        case CompensatorFormat::Fp32:
          f.values = floats(key + ".weight");
          break;
      }
      return f;
    };
    q.u = readFactor(name + ".lora_u", b.rows, q.rank);
    q.v = readFactor(name + ".lora_v", q.rank, b.cols);
  }
  return q;
}

}  // namespace moewb::quant

// SPDX-License-Identifier: MIT
#include "moewb/checkpoint.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "moewb/checkpoint_trust.h"
#include "moewb/error.h"
#include "moewb/parallel.h"

namespace fs = std::filesystem;

namespace moewb {

namespace {

nlohmann::json readJsonFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw Error(p.string() + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw Error(p.string() + ": not valid JSON: " + e.what());
  }
}

// "layers.2" sorts before "layers.10": compare digit runs by value.
bool naturalLess(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      std::size_t i2 = i, j2 = j;
      while (i2 < a.size() && std::isdigit(static_cast<unsigned char>(a[i2]))) ++i2;
      while (j2 < b.size() && std::isdigit(static_cast<unsigned char>(b[j2]))) ++j2;
      auto da = a.substr(i, i2 - i), db = b.substr(j, j2 - j);
      da.erase(0, std::min(da.find_first_not_of('0'), da.size() - 1));
      db.erase(0, std::min(db.find_first_not_of('0'), db.size() - 1));
      if (da.size() != db.size()) return da.size() < db.size();
      if (da != db) return da < db;
      i = i2;
      j = j2;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

bool endsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::shared_ptr<Checkpoint> Checkpoint::open(const std::string& path_in, const ProgressFn& progress) {
  ProgressReporter reporter(progress);
  auto check = [&reporter](double fraction, std::string_view stage) {
    if (!reporter.report(fraction, stage)) throw Cancelled{};
  };
  std::shared_ptr<Checkpoint> ck(new Checkpoint());
  fs::path path = path_in;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path_in + ": no such file or directory");

  fs::path index_file;
  std::vector<fs::path> shard_paths;
  if (fs::is_directory(path)) {
    ck->root_ = path.string();
    if (fs::exists(path / "model.safetensors.index.json")) {
      index_file = path / "model.safetensors.index.json";
    } else if (fs::exists(path / "model.safetensors")) {
      shard_paths.push_back(path / "model.safetensors");
    } else {
      for (const auto& e : fs::directory_iterator(path))
        if (e.is_regular_file() && e.path().extension() == ".safetensors") shard_paths.push_back(e.path());
      std::sort(shard_paths.begin(), shard_paths.end());
      if (shard_paths.empty()) {
        std::vector<fs::path> indexes;
        for (const auto& e : fs::directory_iterator(path))
          if (endsWith(e.path().filename().string(), ".safetensors.index.json")) indexes.push_back(e.path());
        if (indexes.size() == 1) index_file = indexes[0];
        else
          throw Error(path_in + ": no .safetensors files or model.safetensors.index.json in this directory");
      }
    }
  } else if (endsWith(path.string(), ".json")) {
    index_file = path;
    ck->root_ = path.parent_path().string();
  } else {
    shard_paths.push_back(path);
    ck->root_ = path.parent_path().string();
  }
  if (ck->root_.empty()) ck->root_ = ".";
  // A single .safetensors file named by the user is trusted; what a folder or an index names is checked.
  const bool check_links = fs::is_directory(path) || !index_file.empty();
  if (check_links) {
    if (!index_file.empty()) requireInsideCheckpoint(ck->root_, index_file, "index");
    for (const auto& p : shard_paths) requireInsideCheckpoint(ck->root_, p, "shard");
  }

  // weight_map: tensor -> shard file, when an index is used.
  std::vector<std::pair<std::string, std::string>> weight_map;
  if (!index_file.empty()) {
    auto idx = readJsonFile(index_file);
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      throw Error(index_file.string() + ": expected an object with a 'weight_map' object");
    std::set<std::string> files;
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      if (!it->is_string()) throw Error(index_file.string() + ": weight_map entry '" + it.key() + "' must name a file");
      const auto file = it->get<std::string>();
      fs::path rel(file);
      if (rel.is_absolute() || file.find("..") != std::string::npos || file.empty())
        throw Error(index_file.string() + ": weight_map entry '" + it.key() + "' names '" + file +
                    "', expected a file name inside the checkpoint directory");
      weight_map.emplace_back(it.key(), file);
      files.insert(file);
    }
    for (const auto& f : files) {
      fs::path p = index_file.parent_path() / f;
      requireInsideCheckpoint(index_file.parent_path(), p, "shard");
      if (!fs::is_regular_file(p)) throw Error(index_file.string() + ": shard '" + f + "' listed in weight_map does not exist");
      shard_paths.push_back(p);
    }
  }

  // Read all shard headers (in parallel: a 1000-shard index must open in well under a second).
  std::vector<SafetensorsHeader> headers(shard_paths.size());
  std::vector<std::string> identities(shard_paths.size());
  std::atomic<std::size_t> headers_read{0};
  parallelFor(shard_paths.size(), [&](std::size_t i) {
    check(0.8 * double(headers_read.load()) / double(shard_paths.size()), "shard headers");
    headers[i] = readSafetensorsHeader(shard_paths[i].string(), &identities[i]);
    ++headers_read;
  });
  check(0.8, "tensor index");
  for (const auto& p : shard_paths) ck->files_.push_back(p.string());
  for (const auto& id : identities) ck->identity_ += id + ";";
  ck->maps_.resize(ck->files_.size());

  auto addRecord = [&](int file, const SafetensorsTensor& t) {
    TensorRecord r;
    r.name = t.name;
    r.file = file;
    r.dtype = t.dtype;
    r.shape = t.shape;
    r.offset = headers[file].dataStart() + t.begin;
    r.nbytes = t.end - t.begin;
    ck->tensors_.push_back(std::move(r));
  };
  if (!index_file.empty()) {
    std::unordered_map<std::string, int> file_index;
    for (std::size_t i = 0; i < shard_paths.size(); ++i) file_index[fs::path(shard_paths[i]).filename().string()] = int(i);
    std::vector<std::unordered_map<std::string_view, const SafetensorsTensor*>> by_name(headers.size());
    for (std::size_t i = 0; i < headers.size(); ++i)
      for (const auto& t : headers[i].tensors) by_name[i][t.name] = &t;
    ck->tensors_.reserve(weight_map.size());
    for (const auto& [name, file] : weight_map) {
      int fi = file_index.at(fs::path(file).filename().string());
      auto it = by_name[fi].find(name);
      if (it == by_name[fi].end())
        throw Error(index_file.string() + ": tensor '" + name + "' is mapped to '" + file + "' but that shard has no such tensor");
      addRecord(fi, *it->second);
    }
  } else {
    for (std::size_t i = 0; i < headers.size(); ++i)
      for (const auto& t : headers[i].tensors) addRecord(int(i), t);
  }
  check(0.85, "tensor index");
  std::sort(ck->tensors_.begin(), ck->tensors_.end(), [](const auto& a, const auto& b) { return naturalLess(a.name, b.name); });
  check(0.95, "tensor index");
  for (std::size_t i = 0; i < ck->tensors_.size(); ++i) {
    auto [it, inserted] = ck->by_name_.emplace(ck->tensors_[i].name, i);
    if (!inserted) throw Error(ck->files_[ck->tensors_[i].file] + ": tensor '" + ck->tensors_[i].name + "' appears in more than one shard");
  }

  fs::path config = fs::path(ck->root_) / "config.json";
  if (fs::exists(config)) {
    if (check_links) requireInsideCheckpoint(ck->root_, config, "config");
    ck->config_ = readJsonFile(config);
    if (!ck->config_.is_object()) throw Error(config.string() + ": expected a JSON object");
  }
  check(1.0, "opened");
  return ck;
}

std::optional<std::size_t> Checkpoint::find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

uint64_t Checkpoint::totalBytes() const {
  uint64_t total = 0;
  for (const auto& t : tensors_) total += t.nbytes;
  return total;
}

std::span<const std::byte> Checkpoint::bytes(std::size_t i) const {
  const auto& t = tensors_.at(i);
  std::shared_ptr<MappedFile> map;
  {
    std::lock_guard lock(map_mutex_);
    if (!maps_[t.file]) {
      maps_[t.file] = MappedFile::open(files_[t.file]);
      // The header was validated when the checkpoint was opened; a file that shrank since is caught here.
      if (maps_[t.file]->size() < t.offset + t.nbytes) {
        maps_[t.file].reset();
        throw Error(files_[t.file] + ": file changed since it was opened (tensor '" + t.name + "' is past its end)");
      }
    }
    map = maps_[t.file];
  }
  return {map->data() + t.offset, t.nbytes};
}

std::vector<float> Checkpoint::readFloat(std::size_t i) const {
  const auto& t = tensors_.at(i);
  if (t.dtype == DType::BOOL) throw Error("tensor '" + t.name + "' is BOOL and cannot be read as numbers");
  auto raw = bytes(i);
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  convertToFloat(t.dtype, raw.data(), out.size(), out.data());
  if (t.dtype != DType::F8_E4M3 && t.dtype != DType::F8_E5M2) return out;

  // FP8 weights carry their scales in companion tensors.
  if (auto s = find(t.name + "_scale_inv")) {
    auto scale = readFloat(*s);
    const auto& st = tensors_[*s];
    if (t.shape.size() != 2 || st.shape.size() != 2)
      throw Error("tensor '" + t.name + "': block scales are supported for 2-D weights only");
    int64_t bo = 128, bi = 128;
    if (auto q = config_.find("quantization_config"); q != config_.end() && q->contains("weight_block_size")) {
      const auto& b = (*q)["weight_block_size"];
      if (b.is_array() && b.size() == 2 && b[0].is_number_integer() && b[1].is_number_integer() &&
          b[0].get<int64_t>() > 0 && b[1].get<int64_t>() > 0) {
        bo = b[0].get<int64_t>();
        bi = b[1].get<int64_t>();
      }
    }
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const int64_t sr = (rows + bo - 1) / bo, sc = (cols + bi - 1) / bi;
    if (st.shape[0] != sr || st.shape[1] != sc)
      throw Error("tensor '" + st.name + "': expected block scales of shape [" + std::to_string(sr) + ", " +
                  std::to_string(sc) + "] for weight '" + t.name + "' with " + std::to_string(bo) + "x" +
                  std::to_string(bi) + " blocks");
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] *= scale[(r / bo) * sc + c / bi];
  } else if (auto s2 = find(t.name + "_scale")) {
    auto scale = readFloat(*s2);
    const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
    const int64_t per_row = rows ? static_cast<int64_t>(out.size()) / rows : 0;
    if (scale.size() == 1) {
      for (auto& v : out) v *= scale[0];
    } else if (static_cast<int64_t>(scale.size()) == rows) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < per_row; ++c) out[r * per_row + c] *= scale[r];
    } else {
      throw Error("tensor '" + tensors_[*s2].name + "': expected a per-tensor or per-row scale for '" + t.name + "'");
    }
  }
  return out;
}

}  // namespace moewb

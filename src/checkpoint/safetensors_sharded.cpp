#include "checkpoint/safetensors_sharded.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace megadlm {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

}  // namespace

ShardedSafetensors::ShardedSafetensors(const std::string& dir) : dir_(dir) {
  const std::string index_path = dir + "/" + kIndexName;
  if (!fs::exists(index_path)) {
    const std::string single = dir + "/" + kSingleName;
    MEGADLM_CHECK(fs::exists(single), dir, ": neither ", kIndexName, " nor ", kSingleName, " is there");
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const std::string& n : files_[0]->names()) where_[n] = 0;
    return;
  }
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_file(index_path));
  } catch (const nlohmann::json::exception& e) {
    fail(index_path, ": not valid JSON (", e.what(), ")");
  }
  MEGADLM_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), index_path,
                ": lacks a 'weight_map' object");
  MEGADLM_CHECK(!index["weight_map"].empty(), index_path, ": 'weight_map' is empty");
  std::map<std::string, size_t> file_ids;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    MEGADLM_CHECK(it->is_string(), index_path, ": weight_map entry '", it.key(), "' is not a file name");
    const std::string file = it->get<std::string>();
    // A shard is a plain file name beside the index: no directories, so an index cannot point
    // outside the checkpoint.
    MEGADLM_CHECK(!file.empty() && file.find('/') == std::string::npos && file.find('\\') == std::string::npos &&
                   file != "." && file != "..",
                  index_path, ": weight_map entry '", it.key(), "' names shard '", file, "', which is not a file beside the index");
    auto f = file_ids.find(file);
    if (f == file_ids.end()) {
      const std::string path = dir + "/" + file;
      MEGADLM_CHECK(fs::exists(path), index_path, ": shard '", file, "' (holding '", it.key(), "') does not exist");
      files_.push_back(std::make_unique<SafetensorsFile>(path));
      f = file_ids.emplace(file, files_.size() - 1).first;
    }
    MEGADLM_CHECK(files_[f->second]->has(it.key()), index_path, ": tensor '", it.key(), "' is mapped to shard '", file,
                  "' but that shard does not hold it");
    where_[it.key()] = f->second;
  }
  // Every tensor of every shard must be listed, and listed in that shard.
  for (const auto& [file, id] : file_ids)
    for (const std::string& n : files_[id]->names()) {
      auto w = where_.find(n);
      MEGADLM_CHECK(w != where_.end(), index_path, ": shard '", file, "' holds tensor '", n, "' that the index does not list");
      MEGADLM_CHECK(w->second == id, index_path, ": tensor '", n, "' is in shard '", file, "' but the index maps it elsewhere");
    }
}

std::vector<std::string> ShardedSafetensors::names() const {
  std::vector<std::string> out;
  for (const auto& [n, id] : where_) out.push_back(n);
  return out;
}

Tensor ShardedSafetensors::get(const std::string& name) const {
  auto it = where_.find(name);
  MEGADLM_CHECK(it != where_.end(), dir_, ": the checkpoint has no tensor '", name, "'");
  return files_[it->second]->get(name);
}

DType ShardedSafetensors::dominant_dtype() const {
  std::map<DType, int64_t> bytes;
  for (const auto& [n, id] : where_) {
    const Tensor t = files_[id]->get(n);
    bytes[t.dtype()] += static_cast<int64_t>(t.nbytes());
  }
  DType best = DType::F32;
  int64_t most = -1;
  for (const auto& [d, b] : bytes)
    if (b > most) most = b, best = d;
  return best;
}

std::vector<std::string> write_sharded_safetensors(const std::string& dir, const std::vector<SafetensorsEntry>& tensors,
                                                   int64_t max_shard_bytes,
                                                   const std::map<std::string, std::string>& metadata) {
  fs::create_directories(dir);
  // Remove what an earlier export left, so that shards of two writes never mix.
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n == kIndexName || (n.rfind("model", 0) == 0 && n.size() > 12 && n.substr(n.size() - 12) == ".safetensors"))
      fs::remove(e.path());
  }
  int64_t total = 0;
  for (const auto& t : tensors) total += static_cast<int64_t>(t.tensor.nbytes());
  if (max_shard_bytes <= 0 || total <= max_shard_bytes) {
    write_safetensors(dir + "/" + kSingleName, tensors, metadata);
    return {kSingleName};
  }
  // Greedy packing in order; a tensor larger than the limit gets a shard of its own.
  std::vector<std::vector<SafetensorsEntry>> shards(1);
  int64_t cur = 0;
  for (const auto& t : tensors) {
    const int64_t b = static_cast<int64_t>(t.tensor.nbytes());
    if (!shards.back().empty() && cur + b > max_shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(t);
    cur += b;
  }
  std::vector<std::string> names;
  nlohmann::json index;
  index["metadata"]["total_size"] = total;
  index["weight_map"] = nlohmann::json::object();
  const size_t n = shards.size();
  for (size_t s = 0; s < n; ++s) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", s + 1, n);
    write_safetensors(dir + "/" + buf, shards[s], metadata);
    for (const auto& t : shards[s]) index["weight_map"][t.name] = buf;
    names.push_back(buf);
  }
  // The index last: a reader that finds it finds every shard it names.
  write_file_atomic(dir + "/" + kIndexName, index.dump(2) + "\n");
  names.push_back(kIndexName);
  return names;
}

int64_t parse_shard_size(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  MEGADLM_CHECK(i > 0, "shard size '", s, "' does not start with a number (e.g. 5GB, 200MB, 20KB)");
  double v = 0;
  try {
    v = std::stod(s.substr(0, i));
  } catch (...) {
    fail("shard size '", s, "' is not a number");
  }
  std::string unit = s.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  if (unit == "" || unit == "B") mult = 1;
  else if (unit == "KB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else if (unit == "KIB") mult = 1024.0;
  else if (unit == "MIB") mult = 1024.0 * 1024.0;
  else if (unit == "GIB") mult = 1024.0 * 1024.0 * 1024.0;
  else fail("shard size '", s, "' has unknown unit '", s.substr(i), "' (B, KB, MB, GB, KiB, MiB, GiB)");
  return static_cast<int64_t>(v * mult);
}

}  // namespace megadlm

#pragma once
// HuggingFace's sharded safetensors: a directory holding either one model.safetensors, or several
// shard files plus model.safetensors.index.json = {"metadata": {"total_size": bytes},
// "weight_map": {tensor name: shard file name}}. The reader opens every shard the index names and
// checks that the index and the shards agree (each listed tensor is in its shard, no shard holds a
// tensor the index does not list, no name in two shards, shard names stay inside the directory);
// any disagreement is an Error naming the index file and the tensor or shard at fault.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"

namespace megadlm {

class ShardedSafetensors {
 public:
  // `dir` holds model.safetensors.index.json (preferred when present) or model.safetensors.
  explicit ShardedSafetensors(const std::string& dir);

  bool has(const std::string& name) const { return where_.count(name) > 0; }
  std::vector<std::string> names() const;  // sorted
  Tensor get(const std::string& name) const;  // view, valid while this object lives; Error naming a missing tensor
  const std::string& dir() const { return dir_; }
  // The dtype most tensors are stored in (F32 / BF16 / F16), used as the default export dtype.
  DType dominant_dtype() const;
  size_t shard_count() const { return files_.size(); }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor -> index into files_
};

// Writes `tensors` into `dir` as model.safetensors when their data fits in max_shard_bytes (or
// max_shard_bytes <= 0), otherwise as model-0000k-of-0000n.safetensors shards (tensors kept whole,
// in the given order) plus model.safetensors.index.json. Every file is written atomically. Stale
// model*.safetensors files and index of an earlier write in `dir` are removed first so that a
// reader never mixes the two. Returns the file names written.
std::vector<std::string> write_sharded_safetensors(const std::string& dir, const std::vector<SafetensorsEntry>& tensors,
                                                   int64_t max_shard_bytes,
                                                   const std::map<std::string, std::string>& metadata = {});

// "5GB", "200MB", "20KB", "1000" (bytes; decimal units as HuggingFace's max_shard_size); Error otherwise.
int64_t parse_shard_size(const std::string& s);

}  // namespace megadlm

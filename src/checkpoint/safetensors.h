#pragma once
// safetensors: 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets},
// "__metadata__": {...}}, then the raw tensor bytes. The reader memory-maps the file and validates
// every field (header length within the file, offsets in range and not overlapping, sizes matching
// shape x dtype, known dtypes) before handing out views; a lying file gives an Error naming it.
// The writer writes to a temporary name beside the target, fsyncs, and renames (core/file_io.h), so a
// crash never leaves a partial file under the final name.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "core/tensor.h"

namespace megadlm {

const char* safetensors_dtype_name(DType t);      // "F32", "BF16", ...
DType safetensors_dtype_from_name(const std::string& s, const std::string& file);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // maps and validates
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  bool has(const std::string& name) const { return entries_.count(name) > 0; }
  std::vector<std::string> names() const;
  // A read-only view into the mapping (valid while this object lives).
  Tensor get(const std::string& name) const;
  // Copies the tensor into dst (same numel), converting BF16/F16 -> F32 when dst is F32.
  void read_into(const std::string& name, Tensor& dst) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    uint64_t begin, end;
    const char* at = nullptr;  // the bytes: in the mapping, or in aligned_copies_ when misaligned there
  };
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  const char* data_ = nullptr;  // start of the byte buffer
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
  // The format does not require the data buffer (at 8 + header length) to be aligned, but views are
  // read as their dtype; a tensor misaligned in the file is copied once into aligned memory here.
  std::vector<std::unique_ptr<uint64_t[]>> aligned_copies_;
};

struct SafetensorsEntry {
  std::string name;
  Tensor tensor;  // CPU, contiguous
};

// Writes atomically (temp file, fsync, rename). Throws Error naming the path on any I/O failure,
// leaving any previous file at `path` untouched.
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata = {});


}  // namespace megadlm

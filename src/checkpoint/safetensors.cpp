#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"

namespace megadlm {

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F8E4M3: return "F8_E4M3";
    case DType::F8E5M2: return "F8_E5M2";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U16: return "U16";
    case DType::U8: return "U8";
  }
  return "?";
}

DType safetensors_dtype_from_name(const std::string& s, const std::string& file) {
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2, DType::I32, DType::I64,
                  DType::U16, DType::U8})
    if (s == safetensors_dtype_name(t)) return t;
  fail(file, ": unsupported safetensors dtype '", s, "'");
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  require_readable_file(path);
  const int fd = ::open(path.c_str(), O_RDONLY);
  MEGADLM_CHECK(fd >= 0, path, ": cannot open (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail(path, ": cannot stat");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    fail(path, ": truncated safetensors file (", size_, " bytes, no header length)");
  }
  map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  MEGADLM_CHECK(map_ != MAP_FAILED, path, ": mmap failed");
  const auto* bytes = static_cast<const unsigned char*>(map_);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  try {
    MEGADLM_CHECK(header_len <= size_ - 8, path, ": header length ", header_len, " runs past the end of the file (",
                  size_, " bytes)");
    const char* header = static_cast<const char*>(map_) + 8;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(header, header + header_len);
    } catch (const nlohmann::json::exception& e) {
      fail(path, ": header is not valid JSON (", e.what(), ")");
    }
    MEGADLM_CHECK(j.is_object(), path, ": header is not a JSON object");
    data_ = header + header_len;
    const uint64_t buffer_size = size_ - 8 - header_len;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "__metadata__") {
        MEGADLM_CHECK(it->is_object(), path, ": __metadata__ is not an object");
        for (auto m = it->begin(); m != it->end(); ++m)
          if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
        continue;
      }
      const std::string& name = it.key();
      const auto& v = *it;
      MEGADLM_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), path,
                    ": tensor '", name, "' lacks dtype, shape or data_offsets");
      MEGADLM_CHECK(v["dtype"].is_string(), path, ": tensor '", name, "' has a non-string dtype");
      Entry e;
      e.dtype = safetensors_dtype_from_name(v["dtype"].get<std::string>(), path);
      MEGADLM_CHECK(v["shape"].is_array() && v["shape"].size() <= static_cast<size_t>(Shape::kMaxDims), path,
                    ": tensor '", name, "' has a bad shape");
      uint64_t numel = 1;
      for (const auto& d : v["shape"]) {
        MEGADLM_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), path, ": tensor '",
                      name, "' has a negative or non-integer dimension");
        const uint64_t dim = d.get<uint64_t>();
        MEGADLM_CHECK(dim == 0 || numel <= buffer_size / dim, path, ": tensor '", name, "' is larger than the file");
        numel *= dim;
        e.shape.d[e.shape.n++] = static_cast<int64_t>(dim);
      }
      const auto& off = v["data_offsets"];
      MEGADLM_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                    path, ": tensor '", name, "' has malformed data_offsets");
      e.begin = off[0].get<uint64_t>();
      e.end = off[1].get<uint64_t>();
      MEGADLM_CHECK(e.begin <= e.end && e.end <= buffer_size, path, ": tensor '", name, "' data_offsets [", e.begin,
                    ", ", e.end, ") are outside the data buffer of ", buffer_size, " bytes");
      MEGADLM_CHECK(e.end - e.begin == numel * dtype_size(e.dtype), path, ": tensor '", name, "' has ",
                    e.end - e.begin, " bytes but its shape and dtype need ", numel * dtype_size(e.dtype));
      if (e.end > e.begin) ranges.emplace_back(e.begin, e.end);
      entries_[name] = e;
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
      MEGADLM_CHECK(ranges[i].first >= ranges[i - 1].second, path, ": tensor data ranges overlap at byte ",
                    ranges[i].first);
    // A header length that is not a multiple of 8 (allowed by the format) leaves tensors misaligned
    // for their dtype, and reading them through a float* or uint16_t* would be undefined behaviour.
    for (auto& [name, e] : entries_) {
      e.at = data_ + e.begin;
      const uint64_t bytes = e.end - e.begin;
      if (bytes > 0 && reinterpret_cast<uintptr_t>(e.at) % dtype_size(e.dtype) != 0) {
        aligned_copies_.emplace_back(new uint64_t[(bytes + 7) / 8]);
        std::memcpy(aligned_copies_.back().get(), e.at, bytes);
        e.at = reinterpret_cast<const char*>(aligned_copies_.back().get());
      }
    }
  } catch (...) {
    ::munmap(map_, size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, size_);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : entries_) out.push_back(k);
  return out;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  auto it = entries_.find(name);
  MEGADLM_CHECK(it != entries_.end(), path_, ": no tensor named '", name, "'");
  const Entry& e = it->second;
  return Tensor::borrow(const_cast<char*>(e.at), e.shape, e.dtype);
}

void SafetensorsFile::read_into(const std::string& name, Tensor& dst) const {
  Tensor src = get(name);
  MEGADLM_CHECK(src.numel() == dst.numel(), path_, ": tensor '", name, "' has shape ", src.shape().str(),
                " but the model expects ", dst.shape().str());
  if (src.dtype() == dst.dtype()) {
    if (dst.nbytes() > 0) std::memcpy(dst.raw(), src.raw(), dst.nbytes());  // an empty tensor has no storage
    return;
  }
  MEGADLM_CHECK(dst.dtype() == DType::F32, path_, ": cannot convert '", name, "' from ", dtype_name(src.dtype()),
                " to ", dtype_name(dst.dtype()));
  float* out = dst.data<float>();
  const int64_t n = dst.numel();
  if (src.dtype() == DType::BF16) {
    const auto* in = static_cast<const uint16_t*>(src.raw());
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
  } else if (src.dtype() == DType::F16) {
    const auto* in = static_cast<const uint16_t*>(src.raw());
    for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(in[i]);
  } else {
    fail(path_, ": cannot convert '", name, "' from ", dtype_name(src.dtype()), " to float32");
  }
}

// ---- writing -------------------------------------------------------------------------------------
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    MEGADLM_CHECK(t.tensor.device() == Device::CPU, path, ": tensor '", t.name, "' is not on the CPU");
    std::vector<int64_t> shape(t.tensor.shape().d, t.tensor.shape().d + t.tensor.dim());
    header[t.name] = {{"dtype", safetensors_dtype_name(t.tensor.dtype())},
                      {"shape", shape},
                      {"data_offsets", {offset, offset + t.tensor.nbytes()}}};
    offset += t.tensor.nbytes();
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8) h.push_back(' ');  // the data buffer starts 8-byte aligned
  char len[8];
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  std::vector<std::pair<const void*, size_t>> pieces = {{len, 8}, {h.data(), h.size()}};
  for (const auto& t : tensors) pieces.emplace_back(t.tensor.raw(), t.tensor.nbytes());
  write_file_atomic(path, pieces);
}

}  // namespace megadlm

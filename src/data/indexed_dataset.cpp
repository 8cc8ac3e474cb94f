#include "data/indexed_dataset.h"

#include "core/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <thread>
#include <type_traits>

#include "core/error.h"

namespace megadlm {

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // = 34

// Unaligned little-endian loads: the arrays in the .idx start at byte 34, which is not aligned for
// int32/int64, so elements are read with memcpy (one plain load on x86).
template <typename T>
inline T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool is_known_code(uint8_t c) { return c >= 1 && c <= 8; }


}  // namespace

size_t index_dtype_size(IndexDType t) {
  switch (t) {
    case IndexDType::U8:
    case IndexDType::I8: return 1;
    case IndexDType::I16:
    case IndexDType::U16: return 2;
    case IndexDType::I32:
    case IndexDType::F32: return 4;
    case IndexDType::I64:
    case IndexDType::F64: return 8;
  }
  fail("unknown MMIDIDX dtype code ", static_cast<int>(t));
}

const char* index_dtype_name(IndexDType t) {
  switch (t) {
    case IndexDType::U8: return "uint8";
    case IndexDType::I8: return "int8";
    case IndexDType::I16: return "int16";
    case IndexDType::I32: return "int32";
    case IndexDType::I64: return "int64";
    case IndexDType::F64: return "float64";
    case IndexDType::F32: return "float32";
    case IndexDType::U16: return "uint16";
  }
  return "unknown";
}

IndexDType optimal_index_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? IndexDType::U16 : IndexDType::I32;
}

// ---- MappedFile -----------------------------------------------------------------------------------

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot open (", errno_text(), ")");
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    fail(path, ": cannot stat (", why, ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, S_ISDIR(st.st_mode) ? ": is a directory, not a file" : ": not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const std::string why = errno_text();
      ::close(fd);
      fail(path, ": cannot mmap ", size_, " bytes (", why, ")");
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept : path_(std::move(o.path_)), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(o.path_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

// ---- IndexedDataset: open and validate -------------------------------------------------------------

IndexedDataset::IndexedDataset(const std::string& prefix, int64_t vocab_size)
    : prefix_(prefix), vocab_size_(vocab_size) {
  const std::string ip = idx_path(prefix), bp = bin_path(prefix);
  idx_ = MappedFile(ip);
  const uint8_t* p = idx_.data();
  const uint64_t size = idx_.size();
  if (size == 0) fail(ip, ": empty file (not a Megatron MMIDIDX index)");
  if (size < kHeaderBytes)
    fail(ip, ": truncated header (", size, " bytes; a MMIDIDX header has ", kHeaderBytes, ")");
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0) fail(ip, ": bad magic (not a Megatron MMIDIDX index)");
  const uint64_t version = load<uint64_t>(p + 9);
  if (version != 1) fail(ip, ": unsupported MMIDIDX version ", version, " (only version 1 exists)");
  const uint8_t code = p[17];
  if (!is_known_code(code)) fail(ip, ": unknown dtype code ", static_cast<int>(code), " (Megatron's codes are 1..8)");
  dtype_ = static_cast<IndexDType>(code);
  if (dtype_ == IndexDType::F32 || dtype_ == IndexDType::F64)
    fail(ip, ": dtype ", index_dtype_name(dtype_), " (code ", static_cast<int>(code), ") cannot hold token ids");
  const uint64_t s = load<uint64_t>(p + 18);
  const uint64_t d = load<uint64_t>(p + 26);

  // The arrays need 34 + 12 S + 8 D bytes (+ S for multimodal modes); 128-bit arithmetic so that a
  // lying header cannot overflow the comparison.
  const unsigned __int128 need = static_cast<unsigned __int128>(kHeaderBytes) +
                                 static_cast<unsigned __int128>(s) * 12u + static_cast<unsigned __int128>(d) * 8u;
  if (need > size) {
    const bool huge = need > static_cast<unsigned __int128>(std::numeric_limits<uint64_t>::max());
    fail(ip, ": header claims ", s, " sequences and ", d, " document-index entries, which need ",
         huge ? std::string("more than 2^64") : std::to_string(static_cast<uint64_t>(need)), " bytes, but the file has ",
         size, " (truncated or corrupt)");
  }
  const uint64_t need64 = static_cast<uint64_t>(need);
  if (size != need64 && size != need64 + s)
    fail(ip, ": file has ", size, " bytes but the header (", s, " sequences, ", d,
         " document-index entries) describes ", need64, " (trailing bytes or a wrong count)");
  if (d == 0) fail(ip, ": document index is empty (it must hold at least the leading 0)");
  num_sequences_ = static_cast<int64_t>(s);
  num_doc_entries_ = static_cast<int64_t>(d);
  lengths_at_ = kHeaderBytes;
  pointers_at_ = lengths_at_ + 4 * s;
  docs_at_ = pointers_at_ + 8 * s;

  // Document index: starts at 0, non-decreasing, ends at S.
  int64_t prev = load<int64_t>(p + docs_at_);
  if (prev != 0) fail(ip, ": document index starts at ", prev, " (must be 0)");
  for (int64_t j = 1; j < num_doc_entries_; ++j) {
    const int64_t v = load<int64_t>(p + docs_at_ + 8 * static_cast<uint64_t>(j));
    if (v < prev) fail(ip, ": document index decreases at entry ", j, " (", prev, " then ", v, ")");
    prev = v;
  }
  if (prev != num_sequences_)
    fail(ip, ": document index ends at ", prev, " but there are ", num_sequences_, " sequences");

  // Every sequence must lie inside the .bin.
  bin_ = MappedFile(bp);
  const uint64_t bin_size = bin_.size();
  const uint64_t item = index_dtype_size(dtype_);
  int64_t total = 0;
  for (int64_t i = 0; i < num_sequences_; ++i) {
    const int32_t len = load<int32_t>(p + lengths_at_ + 4 * static_cast<uint64_t>(i));
    const int64_t ptr = load<int64_t>(p + pointers_at_ + 8 * static_cast<uint64_t>(i));
    if (len < 0) fail(ip, ": sequence ", i, " has negative length ", len);
    if (ptr < 0) fail(ip, ": sequence ", i, " has negative byte offset ", ptr);
    if (static_cast<uint64_t>(ptr) % item != 0)
      fail(ip, ": sequence ", i, " starts at byte ", ptr, ", not a multiple of the ", item, "-byte ",
           index_dtype_name(dtype_), " element");
    const uint64_t bytes = static_cast<uint64_t>(len) * item;
    if (static_cast<uint64_t>(ptr) > bin_size || bytes > bin_size - static_cast<uint64_t>(ptr))
      fail(bp, ": sequence ", i, " (bytes [", ptr, ", ", static_cast<uint64_t>(ptr) + bytes, ")) lies beyond the end of the ",
           bin_size, "-byte file (truncated .bin or corrupt .idx)");
    total += len;
  }
  total_tokens_ = total;
}

int32_t IndexedDataset::sequence_length(int64_t i) const {
  MEGADLM_CHECK(i >= 0 && i < num_sequences_, idx_.path(), ": sequence ", i, " out of range [0, ", num_sequences_, ")");
  return load<int32_t>(idx_.data() + lengths_at_ + 4 * static_cast<uint64_t>(i));
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  MEGADLM_CHECK(i >= 0 && i < num_sequences_, idx_.path(), ": sequence ", i, " out of range [0, ", num_sequences_, ")");
  return load<int64_t>(idx_.data() + pointers_at_ + 8 * static_cast<uint64_t>(i));
}

int64_t IndexedDataset::document_index(int64_t j) const {
  MEGADLM_CHECK(j >= 0 && j < num_doc_entries_, idx_.path(), ": document-index entry ", j, " out of range [0, ",
                num_doc_entries_, ")");
  return load<int64_t>(idx_.data() + docs_at_ + 8 * static_cast<uint64_t>(j));
}

namespace {
// vocab: ids must be below it (0: any non-negative int32).
template <typename T>
void convert_tokens(const uint8_t* src, int64_t count, int32_t* out, const std::string& path, int64_t seq,
                    int64_t vocab) {
  for (int64_t k = 0; k < count; ++k) {
    const T v = load<T>(src + k * sizeof(T));
    if constexpr (std::is_signed_v<T> || sizeof(T) >= 4) {
      if (v < 0 || static_cast<int64_t>(v) > std::numeric_limits<int32_t>::max())
        fail(path, ": sequence ", seq, " holds ", static_cast<int64_t>(v), ", which is not a valid token id");
    }
    if (vocab > 0 && static_cast<int64_t>(v) >= vocab)
      fail(path, ": sequence ", seq, " holds token id ", static_cast<int64_t>(v), " but the model's vocabulary has ",
           vocab, " ids (was the data tokenized with another tokenizer?)");
    out[k] = static_cast<int32_t>(v);
  }
}
}  // namespace

void IndexedDataset::read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const {
  const int64_t len = sequence_length(seq);
  MEGADLM_CHECK(offset >= 0 && count >= 0 && offset <= len && count <= len - offset, prefix_, ": tokens [", offset, ", ",
                offset + count, ") of sequence ", seq, " are outside its ", len, " tokens");
  const uint64_t item = index_dtype_size(dtype_);
  const uint8_t* src = bin_.data() + sequence_pointer(seq) + static_cast<uint64_t>(offset) * item;
  if (count == 0) return;
  switch (dtype_) {
    case IndexDType::U8: convert_tokens<uint8_t>(src, count, out, bin_.path(), seq, vocab_size_); break;
    case IndexDType::I8: convert_tokens<int8_t>(src, count, out, bin_.path(), seq, vocab_size_); break;
    case IndexDType::I16: convert_tokens<int16_t>(src, count, out, bin_.path(), seq, vocab_size_); break;
    case IndexDType::U16: convert_tokens<uint16_t>(src, count, out, bin_.path(), seq, vocab_size_); break;
    case IndexDType::I32: convert_tokens<int32_t>(src, count, out, bin_.path(), seq, vocab_size_); break;
    case IndexDType::I64: convert_tokens<int64_t>(src, count, out, bin_.path(), seq, vocab_size_); break;
    default: fail(bin_.path(), ": dtype ", index_dtype_name(dtype_), " cannot hold token ids");
  }
}

std::vector<int32_t> IndexedDataset::get(int64_t seq) const {
  std::vector<int32_t> out(static_cast<size_t>(sequence_length(seq)));
  read(seq, 0, static_cast<int64_t>(out.size()), out.data());
  return out;
}

// ---- IndexedDatasetWriter ------------------------------------------------------------------------------

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, IndexDType dtype)
    : prefix_(prefix), dtype_(dtype) {
  MEGADLM_CHECK(is_known_code(static_cast<uint8_t>(dtype)) && dtype != IndexDType::F32 && dtype != IndexDType::F64,
                prefix, ": cannot write token ids as dtype code ", static_cast<int>(dtype));
  tmp_bin_ = temporary_name_for(bin_path(prefix));
  tmp_idx_ = temporary_name_for(idx_path(prefix));
  bin_ = std::fopen(tmp_bin_.c_str(), "wb");
  if (!bin_) fail(bin_path(prefix), ": cannot create ", tmp_bin_, " (", errno_text(), ")");
  std::setvbuf(bin_, nullptr, _IOFBF, 1 << 20);
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (bin_) std::fclose(bin_);
  if (!finalized_) {
    std::remove(tmp_bin_.c_str());
    std::remove(tmp_idx_.c_str());
  }
}

void IndexedDatasetWriter::write_bin(const void* p, size_t bytes) {
  if (bytes > 0 && std::fwrite(p, 1, bytes, bin_) != bytes) fail(tmp_bin_, ": write failed (", errno_text(), ")");
}

namespace {
template <typename T>
void narrow_tokens(const int32_t* tokens, int64_t n, std::vector<uint8_t>& buf, const std::string& prefix) {
  buf.resize(static_cast<size_t>(n) * sizeof(T));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t v = tokens[i];
    if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) || v > static_cast<int64_t>(std::numeric_limits<T>::max()))
      fail(prefix, ": token id ", v, " does not fit the dataset's dtype (", sizeof(T) * 8, "-bit ",
           std::is_signed_v<T> ? "signed" : "unsigned", ")");
    const T t = static_cast<T>(v);
    std::memcpy(buf.data() + i * sizeof(T), &t, sizeof(T));
  }
}
}  // namespace

void IndexedDatasetWriter::add_document(const int32_t* tokens, int64_t n, const int32_t* sequence_lengths,
                                        int64_t num_sequences) {
  MEGADLM_CHECK(!finalized_, prefix_, ": add_document after finalize");
  MEGADLM_CHECK(n >= 0 && num_sequences >= 0, prefix_, ": negative token or sequence count (", n, ", ", num_sequences, ")");
  int64_t sum = 0;
  for (int64_t k = 0; k < num_sequences; ++k) {
    MEGADLM_CHECK(sequence_lengths[k] >= 0, prefix_, ": negative sequence length ", sequence_lengths[k]);
    sum += sequence_lengths[k];
  }
  MEGADLM_CHECK(sum == n, prefix_, ": sequence lengths add up to ", sum, " but the document has ", n, " tokens");
  switch (dtype_) {
    case IndexDType::U8: narrow_tokens<uint8_t>(tokens, n, convert_, prefix_); break;
    case IndexDType::I8: narrow_tokens<int8_t>(tokens, n, convert_, prefix_); break;
    case IndexDType::I16: narrow_tokens<int16_t>(tokens, n, convert_, prefix_); break;
    case IndexDType::U16: narrow_tokens<uint16_t>(tokens, n, convert_, prefix_); break;
    case IndexDType::I32: break;
    case IndexDType::I64: {
      convert_.resize(static_cast<size_t>(n) * 8);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t v = tokens[i];
        std::memcpy(convert_.data() + i * 8, &v, 8);
      }
      break;
    }
    default: fail(prefix_, ": cannot write token ids as ", index_dtype_name(dtype_));
  }
  if (dtype_ == IndexDType::I32)
    write_bin(tokens, static_cast<size_t>(n) * 4);
  else
    write_bin(convert_.data(), convert_.size());
  lengths_.insert(lengths_.end(), sequence_lengths, sequence_lengths + num_sequences);
  doc_index_.push_back(static_cast<int64_t>(lengths_.size()));
  tokens_written_ += n;
}

void IndexedDatasetWriter::add_document(const int32_t* tokens, int64_t n) {
  MEGADLM_CHECK(n <= std::numeric_limits<int32_t>::max(), prefix_, ": document of ", n,
                " tokens is longer than a sequence may be (2^31 - 1)");
  std::vector<int32_t> lens;
  if (n > 0) lens.push_back(static_cast<int32_t>(n));
  add_document(tokens, n, lens);
}

void IndexedDatasetWriter::finalize(bool sync_directory) {
  MEGADLM_CHECK(!finalized_, prefix_, ": finalize called twice");
  std::FILE* bin = bin_;
  bin_ = nullptr;
  // The .bin's fsync (the bulk of the data) runs while the .idx is written and synced: each fsync
  // waits on the disk, and two of them in flight share the file system's journal commit.
  std::exception_ptr bin_error;
  std::thread bin_sync([&] {
    try {
      flush_and_close(bin, tmp_bin_);
    } catch (...) {
      bin_error = std::current_exception();
    }
  });
  struct Joiner {
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{bin_sync};

  std::FILE* idx = std::fopen(tmp_idx_.c_str(), "wb");
  if (!idx) fail(idx_path(prefix_), ": cannot create ", tmp_idx_, " (", errno_text(), ")");
  std::setvbuf(idx, nullptr, _IOFBF, 1 << 20);
  bool ok = true;
  auto put = [&](const void* p, size_t bytes) { ok = ok && (bytes == 0 || std::fwrite(p, 1, bytes, idx) == bytes); };
  const uint64_t version = 1, s = lengths_.size(), d = doc_index_.size();
  const uint8_t code = static_cast<uint8_t>(dtype_);
  put(kMagic, sizeof kMagic);
  put(&version, 8);
  put(&code, 1);
  put(&s, 8);
  put(&d, 8);
  put(lengths_.data(), lengths_.size() * 4);
  // Byte offsets: the running sum of the lengths times the element size, written in blocks.
  const int64_t item = static_cast<int64_t>(index_dtype_size(dtype_));
  std::vector<int64_t> block;
  block.reserve(1 << 16);
  int64_t at = 0;
  for (size_t i = 0; i < lengths_.size(); ++i) {
    block.push_back(at);
    at += static_cast<int64_t>(lengths_[i]) * item;
    if (block.size() == block.capacity()) {
      put(block.data(), block.size() * 8);
      block.clear();
    }
  }
  put(block.data(), block.size() * 8);
  put(doc_index_.data(), doc_index_.size() * 8);
  if (!ok) {
    const std::string why = errno_text();
    std::fclose(idx);
    fail(idx_path(prefix_), ": write failed (", why, ")");
  }
  flush_and_close(idx, tmp_idx_);
  bin_sync.join();
  if (bin_error) std::rethrow_exception(bin_error);
  // The .bin first: whoever sees the .idx under its final name finds a complete .bin beside it.
  rename_or_fail(tmp_bin_, bin_path(prefix_));
  try {
    rename_or_fail(tmp_idx_, idx_path(prefix_));
  } catch (...) {
    std::remove(bin_path(prefix_).c_str());  // a .bin without its .idx is no dataset
    throw;
  }
  finalized_ = true;
  if (sync_directory) sync_directory_of(idx_path(prefix_));
}

}  // namespace megadlm

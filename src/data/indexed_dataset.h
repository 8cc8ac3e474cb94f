#pragma once
// Megatron's MMIDIDX (version 1) token data: <prefix>.bin holds the token ids of every sequence back to
// back; <prefix>.idx describes them. Byte layout of the .idx (little endian, no padding):
//
//   offset 0   9 bytes   magic "MMIDIDX\0\0"
//   offset 9   uint64    version = 1
//   offset 17  uint8     dtype code of the .bin (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//                        6 float64, 7 float32, 8 uint16)
//   offset 18  uint64    S = number of sequences
//   offset 26  uint64    D = number of entries of the document index (documents + 1)
//   offset 34  int32[S]  sequence lengths (tokens)
//              int64[S]  sequence byte offsets into the .bin
//              int64[D]  document index: sequence boundaries, 0 first, S last; document d is the
//                        sequences [doc[d], doc[d+1])
//   (a multimodal dataset appends int8[S] sequence modes; accepted and ignored)
//
// Preprocessing without sentence splitting writes one sequence per document, so for GPT data
// "sequence" and "document" coincide except for empty documents (zero sequences).
//
// The reader maps both files and validates every field against the file sizes before any access, so
// a truncated or lying file is an Error naming the file and the fault, never a crash or a huge
// allocation. The writer streams the .bin to a temporary name and renames both files only in
// finalize(), so an interrupted run leaves nothing under the final names.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/file_io.h"

namespace megadlm {

// Megatron's DType codes (megatron/core/datasets/indexed_dataset.py).
enum class IndexDType : uint8_t { U8 = 1, I8 = 2, I16 = 3, I32 = 4, I64 = 5, F64 = 6, F32 = 7, U16 = 8 };

size_t index_dtype_size(IndexDType t);
const char* index_dtype_name(IndexDType t);  // numpy's names: "uint16", "int32", ...
// The token type Megatron picks for a vocabulary: uint16 when vocab_size < 65500, else int32.
IndexDType optimal_index_dtype(int64_t vocab_size);

inline std::string idx_path(const std::string& prefix) { return prefix + ".idx"; }
inline std::string bin_path(const std::string& prefix) { return prefix + ".bin"; }

// A read-only memory map of a whole file (an empty file maps to nothing).
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws Error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

class IndexedDataset {
 public:
  // Opens <prefix>.idx and <prefix>.bin; throws Error naming the file and the fault. With vocab_size
  // > 0, read() also refuses a token id >= vocab_size (data tokenized for another vocabulary) naming
  // the .bin, before it can index past an embedding table.
  explicit IndexedDataset(const std::string& prefix, int64_t vocab_size = 0);

  const std::string& prefix() const { return prefix_; }
  IndexDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_documents() const { return num_doc_entries_ - 1; }
  int64_t total_tokens() const { return total_tokens_; }

  int32_t sequence_length(int64_t i) const;   // i in [0, num_sequences)
  int64_t sequence_pointer(int64_t i) const;  // byte offset into the .bin
  int64_t document_index(int64_t j) const;    // j in [0, num_documents]: sequence boundary

  // out[0..count) = tokens [offset, offset + count) of sequence `seq`, converted to int32. Throws
  // Error when the range leaves the sequence or a value is not a token id (negative, beyond int32, or
  // >= the vocab_size given to the constructor).
  void read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const;  // out: [count]
  std::vector<int32_t> get(int64_t seq) const;                                 // the whole sequence

 private:
  std::string prefix_;
  MappedFile idx_, bin_;
  IndexDType dtype_ = IndexDType::I32;
  int64_t num_sequences_ = 0;
  int64_t num_doc_entries_ = 0;
  int64_t total_tokens_ = 0;
  int64_t vocab_size_ = 0;  // 0: no bound beyond int32
  uint64_t lengths_at_ = 0, pointers_at_ = 0, docs_at_ = 0;  // byte offsets of the arrays in the .idx
};

// Writes <prefix>.bin/.idx in Megatron's layout. Token values are checked against the dtype's range.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, IndexDType dtype);
  ~IndexedDatasetWriter();  // without finalize(): removes the temporary files
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one document made of sequences with the given lengths (their sum must be n); a document
  // with no sequences is allowed (Megatron writes one for an empty text).
  void add_document(const int32_t* tokens, int64_t n, const int32_t* sequence_lengths,
                    int64_t num_sequences);  // tokens: [n], sequence_lengths: [num_sequences]
  void add_document(const int32_t* tokens, int64_t n, const std::vector<int32_t>& sequence_lengths) {
    add_document(tokens, n, sequence_lengths.data(), static_cast<int64_t>(sequence_lengths.size()));
  }
  // One document that is one sequence (the common case); n == 0 gives a document with no sequence.
  void add_document(const int32_t* tokens, int64_t n);  // tokens: [n]
  void add_document(const std::vector<int32_t>& tokens) { add_document(tokens.data(), static_cast<int64_t>(tokens.size())); }

  // Writes the .idx, flushes both files to disk and renames them to their final names.
  // sync_directory false: the caller syncs the directory once after its other renames.
  void finalize(bool sync_directory = true);

  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_documents() const { return static_cast<int64_t>(doc_index_.size()) - 1; }
  int64_t num_tokens() const { return tokens_written_; }

 private:
  void write_bin(const void* p, size_t bytes);

  std::string prefix_, tmp_bin_, tmp_idx_;
  IndexDType dtype_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_index_{0};
  std::vector<uint8_t> convert_;  // staging buffer for the narrow dtypes
  int64_t tokens_written_ = 0;
  bool finalized_ = false;
};


}  // namespace megadlm

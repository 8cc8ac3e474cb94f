#pragma once
// Whole-file I/O that never leaves a partial file under the final name: data is written to a unique
// temporary name in the same directory, flushed and fsynced, then renamed over the target, and the
// directory is synced. Used for dataset indices, sidecars, checkpoints and tokenizer files.
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace megadlm {

// A unique temporary name next to `path` (same directory, so rename() is atomic).
std::string temporary_name_for(const std::string& path);

// Writes the pieces, in order, to `path` atomically. Throws Error naming the path; on failure the
// temporary file is removed and any previous file at `path` is untouched.
void write_file_atomic(const std::string& path, const std::vector<std::pair<const void*, size_t>>& pieces);
void write_file_atomic(const std::string& path, const void* data, size_t bytes);
void write_file_atomic(const std::string& path, const std::string& bytes);

// A file written under a temporary name next to `path` and fsynced at construction, published under
// `path` by commit() (a rename; the caller syncs the directory once for all its renames). Destroyed
// uncommitted, it removes the temporary. Lets a tool write and sync an output early, overlapping the
// fsync with other work, and publish every output at the end.
class StagedFile {
 public:
  StagedFile(std::string path, const void* data, size_t bytes);  // throws Error naming path
  ~StagedFile();
  StagedFile(const StagedFile&) = delete;
  StagedFile& operator=(const StagedFile&) = delete;
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  bool committed_ = false;
};

// Flushes, fsyncs and closes a stream being written to `path` (named in the Error on failure).
void flush_and_close(std::FILE* f, const std::string& path);
// Renames or throws an Error naming both paths.
void rename_or_fail(const std::string& from, const std::string& to);
// Makes renames in the directory of `path` durable (best effort).
void sync_directory_of(const std::string& path);

// Why no file can be created at `path` ("" when one can), found by creating and removing a
// temporary file next to it: lets a program refuse an unwritable output at start-up rather than
// after the work that produces it.
std::string why_cannot_create(const std::string& path);
// An Error "<flag> <path>: cannot create it (<reason>)" when why_cannot_create(path) names a reason.
void check_creatable(const std::string& flag, const std::string& path);

// Every reader of an input file checks it with this first: an Error naming `path` (after `what`,
// e.g. "--prompt-file" or "vocab file", when given) when it does not exist, is a directory, or cannot
// be opened for reading. Other non-directories (pipes, /dev/stdin) pass.
void require_readable_file(const std::string& path, std::string_view what = {});
// An input stream on `path`, checked by require_readable_file.
std::ifstream open_input_file(const std::string& path, std::string_view what = {}, bool binary = true);

// The whole file; Error naming the path (after `what` when given) when it cannot be read.
std::string read_file(const std::string& path, std::string_view what = {});

std::string errno_text();  // strerror(errno)

}  // namespace megadlm

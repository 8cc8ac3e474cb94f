#include "core/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace megadlm {

std::string errno_text() { return std::strerror(errno); }

std::string temporary_name_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
}

void flush_and_close(std::FILE* f, const std::string& path) {
  const bool ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const std::string why = ok ? "" : errno_text();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) fail(path, ": write failed (", why.empty() ? errno_text() : why, ")");
}

void rename_or_fail(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) fail(to, ": cannot rename ", from, " to it (", errno_text(), ")");
}

void sync_directory_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)::fsync(fd);  // some file systems refuse fsync on a directory: best effort
    ::close(fd);
  }
}

void write_file_atomic(const std::string& path, const std::vector<std::pair<const void*, size_t>>& pieces) {
  const std::string tmp = temporary_name_for(path);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(path, ": cannot create ", tmp, " (", errno_text(), ")");
  for (const auto& [data, bytes] : pieces) {
    if (bytes > 0 && std::fwrite(data, 1, bytes, f) != bytes) {
      const std::string why = errno_text();
      std::fclose(f);
      std::remove(tmp.c_str());
      fail(path, ": write failed (", why, ")");
    }
  }
  try {
    flush_and_close(f, path);  // the error names the file the caller asked for, not its temporary
    rename_or_fail(tmp, path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  sync_directory_of(path);
}

StagedFile::StagedFile(std::string path, const void* data, size_t bytes)
    : path_(std::move(path)), tmp_(temporary_name_for(path_)) {
  std::FILE* f = std::fopen(tmp_.c_str(), "wb");
  if (!f) fail(path_, ": cannot create ", tmp_, " (", errno_text(), ")");
  const bool ok = bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes;
  const std::string why = ok ? "" : errno_text();
  try {
    if (!ok) {
      std::fclose(f);
      fail(path_, ": write failed (", why, ")");
    }
    flush_and_close(f, path_);
  } catch (...) {
    std::remove(tmp_.c_str());
    throw;
  }
}

StagedFile::~StagedFile() {
  if (!committed_) std::remove(tmp_.c_str());
}

void StagedFile::commit() {
  MEGADLM_CHECK(!committed_, path_, ": committed twice");
  rename_or_fail(tmp_, path_);
  committed_ = true;
}

void write_file_atomic(const std::string& path, const void* data, size_t bytes) {
  write_file_atomic(path, {{data, bytes}});
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  write_file_atomic(path, bytes.data(), bytes.size());
}

std::string why_cannot_create(const std::string& path) {
  const std::string tmp = temporary_name_for(path);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return errno_text();
  std::fclose(f);
  std::remove(tmp.c_str());
  return "";
}

void check_creatable(const std::string& flag, const std::string& path) {
  const std::string why = why_cannot_create(path);
  MEGADLM_CHECK(why.empty(), flag, " ", path, ": cannot create it (", why, ")");
}

namespace {

// "vocab file 'x'" or "x": how the messages of the input readers name a file.
std::string named(const std::string& path, std::string_view what) {
  return what.empty() ? path : std::string(what) + " '" + path + "'";
}

}  // namespace

void require_readable_file(const std::string& path, std::string_view what) {
  MEGADLM_CHECK(!path.empty(), "no ", what.empty() ? std::string_view("file") : what, " given (empty path)");
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  MEGADLM_CHECK(st.type() != std::filesystem::file_type::not_found, named(path, what), ": cannot open (no such file)");
  MEGADLM_CHECK(st.type() != std::filesystem::file_type::directory, named(path, what), ": is a directory, not a file");
  // Opening tells what status() may not (permissions, a dangling link, EACCES on a parent).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  MEGADLM_CHECK(fd >= 0, named(path, what), ": cannot open (", errno_text(), ")");
  ::close(fd);
}

std::ifstream open_input_file(const std::string& path, std::string_view what, bool binary) {
  require_readable_file(path, what);
  std::ifstream in(path, binary ? std::ios::in | std::ios::binary : std::ios::in);
  MEGADLM_CHECK(in.good(), named(path, what), ": cannot open (", errno_text(), ")");
  return in;
}

std::string read_file(const std::string& path, std::string_view what) {
  std::ifstream in = open_input_file(path, what);
  std::ostringstream os;
  os << in.rdbuf();
  MEGADLM_CHECK(!in.bad(), named(path, what), ": read failed");
  return os.str();
}

}  // namespace megadlm

#pragma once
// Helpers shared by the libFuzzer harnesses in fuzz/: a private scratch directory for readers that take
// a path, and FUZZ_REQUIRE, which turns a broken invariant into a crash libFuzzer records with its input.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace fuzz {

// A broken invariant is a finding: print it and abort (libFuzzer saves the input as crash-*).
#define FUZZ_REQUIRE(cond, what)                                                          \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "FUZZ invariant failed at %s:%d: %s\n", __FILE__, __LINE__, what); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

// One directory per process (two fuzzers may run at once), under /dev/shm when it exists so that the
// per-input file writes stay in memory; removed at normal exit.
// (Heap-held, so that it outlives the static destructors that run before the atexit handler.)
inline const std::string& scratch_dir() {
  static const std::string* dir = new std::string([] {
    std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path().string();
    std::string templ = base + "/megadlm_fuzz_XXXXXX";
    if (!::mkdtemp(templ.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(scratch_dir(), ec); });
    return templ;
  }());
  return *dir;
}

// Writes bytes to <scratch>/<name> (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, const void* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
  return path;
}

inline std::string_view as_view(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace fuzz

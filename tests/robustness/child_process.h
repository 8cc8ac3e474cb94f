#pragma once
// Running the built command-line programs as child processes: output into a log file, an optional
// per-file size limit (RLIMIT_FSIZE, to make writes fail with EFBIG as on a full disk), and a
// deadline after which the child is killed and the test fails instead of hanging.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <cstdlib>
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

namespace megadlm::test {

inline std::string binary_path(const std::string& name) { return std::string(MEGADLM_BINARY_DIR) + "/bin/" + name; }

#define MEGADLM_REQUIRE_BINARY(name)                                                                      \
  do {                                                                                                 \
    if (!std::filesystem::exists(::megadlm::test::binary_path(name)))                                  \
      GTEST_SKIP() << ::megadlm::test::binary_path(name) << " not built (build the " << name << " target)"; \
  } while (0)

struct ChildResult {
  bool exited = false;   // exited normally (else: killed by a signal or by the deadline)
  int exit_code = -1;    // when exited
  int signal = 0;        // when killed by a signal
  std::string output;    // stdout and stderr together
};

inline std::string read_log(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct ChildOptions {
  double timeout_s = 60;
  long long max_file_bytes = -1;  // RLIMIT_FSIZE for the child (-1: unchanged); SIGXFSZ is ignored
  std::string stdout_path;        // stdout into this file ("": into the log with stderr)
};

// Runs the program at path `prog` with `args`, stdout and stderr into `log`, and waits for it.
inline ChildResult run_program(const std::string& prog, const std::vector<std::string>& args, const std::string& log,
                               const ChildOptions& opt = {}) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv{const_cast<char*>(prog.c_str())};
  for (auto& s : copy) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    // In the child only async-signal-safe calls until exec (the parent may have threads).
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(126);
    dup2(fd, 1);
    dup2(fd, 2);
    if (!opt.stdout_path.empty()) {
      const int out = ::open(opt.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (out < 0) _exit(126);
      dup2(out, 1);
    }
    if (opt.max_file_bytes >= 0) {
      // A write past the limit then fails with EFBIG instead of killing the process with SIGXFSZ:
      // what a full disk (ENOSPC) looks like to the writer. An ignored disposition survives exec.
      signal(SIGXFSZ, SIG_IGN);
      struct rlimit rl;
      rl.rlim_cur = rl.rlim_max = static_cast<rlim_t>(opt.max_file_bytes);
      if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(125);
    }
    execv(prog.c_str(), argv.data());
    _exit(127);
  }
  ChildResult r;
  EXPECT_GT(pid, 0) << "fork failed";
  if (pid <= 0) return r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opt.timeout_s);
  int status = 0;
  while (true) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 || std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << prog << " still running after " << opt.timeout_s << " s: killed\n" << read_log(log);
      r.output = read_log(log);
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.exited = WIFEXITED(status);
  if (r.exited) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.output = read_log(log);
  return r;
}

// Runs MEGADLM_BINARY_DIR/bin/<name> with `args`, stdout and stderr into `log`, and waits for it.
inline ChildResult run_binary(const std::string& name, const std::vector<std::string>& args, const std::string& log,
                              const ChildOptions& opt = {}) {
  return run_program(binary_path(name), args, log, opt);
}

// The failure mode every bad input must have: a normal exit with code 1 (an Error), no signal (a
// crash) and no 2 (an internal error, i.e. an exception that is not an Error).
#define EXPECT_CLEAN_ERROR_EXIT(result)                                                                \
  do {                                                                                                 \
    const auto& r_ = (result);                                                                         \
    EXPECT_TRUE(r_.exited) << "killed by signal " << r_.signal << "\n" << r_.output;                   \
    EXPECT_EQ(r_.exit_code, 1) << r_.output;                                                           \
  } while (0)

// The value of ASAN_OPTIONS for a child that runs MPI: this process's options without leak detection,
// as scripts/sanitize.sh runs the MPI tests (OpenMPI's own allocations outlive MPI_Finalize and
// MPI_Abort). Harmless in a build without AddressSanitizer.
inline std::string asan_options_for_mpi() {
  const char* asan = std::getenv("ASAN_OPTIONS");
  return std::string(asan ? asan : "") + ":detect_leaks=0";
}

// mpirun from PATH, or "" when MPI is not installed.
inline std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::filesystem::path p = std::filesystem::path(dirs.substr(start, end - start)) / "mpirun";
    if (std::filesystem::exists(p)) return p.string();
    start = end + 1;
  }
  return "";
}

// Skips the test unless mpirun is installed; declares `var`, its path.
#define MEGADLM_REQUIRE_MPIRUN(var)                                 \
  const std::string var = ::megadlm::test::find_mpirun();           \
  if (var.empty()) GTEST_SKIP() << "mpirun not installed (Debian: openmpi-bin)"

}  // namespace megadlm::test

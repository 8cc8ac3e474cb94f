#include "train/rank_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "parallel/mpi_communicator.h"

namespace megadlm {

namespace {
int g_saved_stderr = 2;  // the real stderr of a silenced rank
}

int start_ranks(int* argc, char*** argv) {
  const int world = init_distributed(argc, argv);
  if (world > 1 && world_rank() != 0) {
    std::fflush(stdout);
    std::fflush(stderr);
    g_saved_stderr = ::dup(2);
    const int null_fd = ::open("/dev/null", O_WRONLY);
    if (null_fd >= 0) {
      ::dup2(null_fd, 1);
      ::dup2(null_fd, 2);
      ::close(null_fd);
    }
  }
  return world;
}

int report_fatal(const char* prog, const char* kind, const std::string& message, int code) {
  if (!distributed_initialized() || world_size() <= 1) {
    std::fprintf(stderr, "%s: %s: %s\n", prog, kind, message.c_str());
    return code;
  }
  const int rank = world_rank();
  if (rank != 0) {
    // Give rank 0 the time to fail on the same error and abort everyone first (one message only).
    std::this_thread::sleep_for(std::chrono::seconds(3));
  }
  const std::string line = (rank == 0 ? std::string() : "[rank " + std::to_string(rank) + "] ") + prog + ": " + kind +
                           ": " + message + "\n";
  ssize_t w = ::write(rank == 0 ? 2 : g_saved_stderr, line.data(), line.size());
  (void)w;
  abort_distributed(code);
}

}  // namespace megadlm

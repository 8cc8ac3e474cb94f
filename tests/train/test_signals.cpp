// Robustness of the real pretrain_difflm binary run as a child process: --exit-signal-handler turns
// SIGTERM into "finish the iteration, save, exit 0"; SIGKILL at a random moment during a save always
// leaves the pointer on a complete checkpoint, and resuming from it is bitwise identical to a run
// that was never interrupted. Every child is reaped with a deadline (SIGKILL on expiry), so a hung
// child fails the test instead of hanging it.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/native_checkpoint.h"
#include "test_util.h"
#include "train/signals.h"
#include "train_fixture.h"

extern char** environ;

namespace fs = std::filesystem;
using namespace megadlm;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kBinary = std::string(MEGADLM_BINARY_DIR) + "/bin/pretrain_difflm";

#define REQUIRE_BINARY()                                                                              \
  do {                                                                                                \
    if (!fs::exists(kBinary)) GTEST_SKIP() << kBinary << " not built (build the pretrain_difflm target)"; \
  } while (0)

// A tiny difflm run; `hidden` sets how long a save takes (optimizer state is 3x the weights).
std::vector<std::string> flags(const std::string& data, int hidden) {
  return {"--model-type", "difflm", "--num-layers", "2", "--hidden-size", std::to_string(hidden),
          "--num-heads", "4", "--seq-length", "32", "--batch-size", "4", "--global-batch-size", "8",
          "--data-path", data, "--tokenizer-type", "NullTokenizer", "--vocab-size", "64",
          "--make-vocab-size-divisible-by", "16", "--mask-token", "62", "--lr", "3e-3", "--lr-warmup-iters", "2",
          "--log-interval", "1", "--eval-interval", "1000", "--eval-iters", "2", "--seed", "7",
          "--data-cache-path", data + "_cache"};
}

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Starts the binary with stdout and stderr into `log`.
pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  std::string prog = kBinary;
  argv.push_back(prog.data());
  std::vector<std::string> copy = args;
  for (auto& s : copy) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  // The child starts with no blocked signals and default SIGTERM/SIGINT, whatever the test runner
  // inherited (a background shell ignores SIGINT, for one).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, kBinary.c_str(), &fa, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  EXPECT_EQ(rc, 0) << "posix_spawn " << kBinary;
  return rc == 0 ? pid : -1;
}

// True while `pid` has not exited; does not reap it (WNOWAIT), so reap() still gets its status.
bool running(pid_t pid) {
  siginfo_t info{};
  return waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
}

// Waits for `pid` up to `seconds`; on expiry kills it (SIGKILL), reaps it and reports a failure.
// Returns the wait status, or -1 when it had to be killed.
int reap(pid_t pid, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) {
      ADD_FAILURE() << "waitpid(" << pid << ") failed";
      return -1;
    }
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "child " << pid << " still running after " << seconds << " s: killed";
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Complete training lines of a metrics.jsonl that may still be being written (a partial last line is
// ignored).
int64_t lines_written(const std::string& metrics) {
  const std::string text = slurp(metrics);
  int64_t n = 0;
  size_t pos = 0;
  while (true) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;
    if (text.substr(pos, nl - pos).find("\"loss\"") != std::string::npos) ++n;  // not "val_loss"
    pos = nl + 1;
  }
  return n;
}

// iteration -> loss of a finished run's metrics.jsonl.
std::map<int64_t, double> losses(const std::string& metrics) {
  std::map<int64_t, double> out;
  for (const auto& j : test::training_lines(metrics)) out[j["iteration"].get<int64_t>()] = j["loss"].get<double>();
  return out;
}

// Loads `save`'s checkpoint into a freshly built model (checksums and shapes verified); returns its
// iteration.
int64_t load_and_verify(const std::vector<std::string>& base, const std::string& save) {
  const std::string dir = resolve_checkpoint_dir(save);
  EXPECT_FALSE(dir.empty()) << save << ": no checkpoint";
  if (dir.empty()) return -1;
  const CheckpointState st = read_checkpoint_state(dir);
  std::vector<std::string> f = {"pretrain_difflm"};
  f = plus(f, plus(base, {"--load", save, "--train-iters", std::to_string(std::max<int64_t>(1, st.iteration))}));
  try {
    Trainer t(test::parse_flags(f));  // the constructor loads model and optimizer, checksums first
  } catch (const std::exception& e) {
    ADD_FAILURE() << dir << " does not load: " << e.what();
  }
  return st.iteration;
}

}  // namespace

TEST(Signals, ParseSignalNames) {
  EXPECT_EQ(parse_signal_name("SIGTERM"), SIGTERM);
  EXPECT_EQ(parse_signal_name("TERM"), SIGTERM);
  EXPECT_EQ(parse_signal_name("SIGUSR1"), SIGUSR1);
  EXPECT_EQ(parse_signal_name(std::to_string(SIGINT)), SIGINT);
  EXPECT_EQ(signal_name(SIGINT), "SIGINT");
  for (const std::string bad : {"SIGKILL", "9", "0", "", "SIGFOO", "12345"}) {
    try {
      parse_signal_name(bad);
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--exit-signal"), std::string::npos) << e.what();
    }
  }
}

// The signals are blocked in the installing thread and in the threads it starts afterwards (so no
// handler interrupts their computation), collected when polled, and the mask is restored after.
TEST(Signals, BlockedInTheInstallingThreadAndItsNewThreads) {
  sigset_t before;
  pthread_sigmask(SIG_SETMASK, nullptr, &before);
  ASSERT_FALSE(sigismember(&before, SIGUSR2));
  install_exit_signal_handlers(SIGUSR2);
  sigset_t now;
  pthread_sigmask(SIG_SETMASK, nullptr, &now);
  EXPECT_TRUE(sigismember(&now, SIGUSR2));
  EXPECT_TRUE(sigismember(&now, SIGINT));
  bool child_blocks = false;
  std::thread([&] {
    sigset_t m;
    pthread_sigmask(SIG_SETMASK, nullptr, &m);
    child_blocks = sigismember(&m, SIGUSR2) && sigismember(&m, SIGINT);
  }).join();
  EXPECT_TRUE(child_blocks);
  kill(getpid(), SIGUSR2);  // process-directed, as from `kill`: stays pending until polled
  EXPECT_EQ(exit_signal_received(), SIGUSR2);
  EXPECT_EQ(exit_signal_received(), SIGUSR2);
  uninstall_exit_signal_handlers();
  pthread_sigmask(SIG_SETMASK, nullptr, &now);
  EXPECT_FALSE(sigismember(&now, SIGUSR2));
  EXPECT_EQ(sigismember(&now, SIGINT), sigismember(&before, SIGINT));
  sigset_t pending;
  sigpending(&pending);
  EXPECT_FALSE(sigismember(&pending, SIGUSR2));
}

TEST(Signals, HandlerRecordsTheFirstSignalAndRestores) {
  struct sigaction before_int {};
  sigaction(SIGINT, nullptr, &before_int);
  install_exit_signal_handlers(SIGUSR1);
  EXPECT_EQ(exit_signal_received(), 0);
  raise(SIGUSR1);  // would terminate the test binary without the handler
  EXPECT_EQ(exit_signal_received(), SIGUSR1);
  raise(SIGINT);
  EXPECT_EQ(exit_signal_received(), SIGUSR1);  // the first one is kept
  uninstall_exit_signal_handlers();
  struct sigaction now {};
  sigaction(SIGUSR1, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
  sigaction(SIGINT, nullptr, &now);
  EXPECT_EQ(now.sa_handler, before_int.sa_handler);  // restored to whatever it was
}

// (a) SIGTERM (or SIGINT) mid-run with --exit-signal-handler: exit 0 with a log line, checkpoint of the iteration
// reached; without the flag SIGTERM keeps its default (the process dies of it). The signal is blocked
// and collected synchronously (signals.h), so no handler runs in the middle of a step.
TEST(Signals, SigtermSavesAndExitsZero) {
  REQUIRE_BINARY();
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 200);
  const auto base = flags(data, 32);
  struct Case {
    bool handler;
    int signum;
  };
  for (const Case c : {Case{true, SIGTERM}, Case{true, SIGINT}, Case{false, SIGTERM}}) {
    const bool handler = c.handler;
    const std::string save = tmp / (std::string(handler ? "with_" : "without_") + signal_name(c.signum)),
                      log = save + ".log";
    std::vector<std::string> f = plus(base, {"--train-iters", "100000", "--save", save});
    if (handler) f.push_back("--exit-signal-handler");
    const pid_t pid = spawn(f, log);
    ASSERT_GT(pid, 0);
    // Let it train a few iterations (bounded: a stuck child is killed and reported by reap()).
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (lines_written(save + "/metrics.jsonl") < 3 && Clock::now() < deadline &&
           running(pid))
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const bool alive = running(pid);  // for the message: a child that died on its own is a different bug
    const int64_t before = lines_written(save + "/metrics.jsonl");
    kill(pid, c.signum);
    const int status = reap(pid, 30);
    ASSERT_NE(status, -1) << slurp(log);
    if (!handler) {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status << "\n" << slurp(log);
      continue;
    }
    ASSERT_TRUE(WIFEXITED(status)) << "status " << status << " (alive when signalled: " << alive << ", "
                                   << before << " iterations logged)\n" << slurp(log);
    EXPECT_EQ(WEXITSTATUS(status), 0) << slurp(log);
    const std::string out = slurp(log);
    EXPECT_NE(out.find("on " + signal_name(c.signum) + " (--exit-signal-handler)"), std::string::npos) << out;
    const int64_t reached = lines_written(save + "/metrics.jsonl");
    EXPECT_GE(reached, 3);
    EXPECT_LT(reached, 100000);
    EXPECT_EQ(load_and_verify(base, save), reached) << "the checkpoint is of the iteration reached";
  }
}

// (b) SIGKILL at random moments of a run that saves every iteration: the pointer always designates a
// complete checkpoint that loads, and resuming from it reproduces the uninterrupted losses bitwise.
TEST(Signals, SigkillDuringSaveLeavesALoadableCheckpointAndExactResume) {
  REQUIRE_BINARY();
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 200);
  const auto base = flags(data, 128);  // ~0.4M parameters: each save writes ~5 MB and fsyncs
  const int64_t N = 10;
  const std::string iters = std::to_string(N);

  // The uninterrupted reference, through the same binary.
  const std::string ref = tmp / "ref";
  const auto t0 = Clock::now();
  pid_t pid = spawn(plus(base, {"--train-iters", iters, "--save", ref, "--save-interval", "1"}), ref + ".log");
  ASSERT_GT(pid, 0);
  int status = reap(pid, 60);
  ASSERT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(ref + ".log");
  const double run_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto want = losses(ref + "/metrics.jsonl");
  ASSERT_EQ(want.size(), static_cast<size_t>(N));

  std::mt19937 rng(20261130);
  const auto budget_end = Clock::now() + std::chrono::seconds(8);  // stop starting tries after this
  int tries = 0, mid_save = 0;
  for (; tries < 16 && (tries < 2 || Clock::now() < budget_end); ++tries) {
    const std::string save = tmp / ("kill" + std::to_string(tries)), log = save + ".log";
    pid = spawn(plus(base, {"--train-iters", iters, "--save", save, "--save-interval", "1"}), log);
    ASSERT_GT(pid, 0);
    // Wait for the first checkpoint, then kill at a random moment of the remaining run (mostly inside
    // a save, since with --save-interval 1 saving dominates).
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!fs::exists(save + "/latest_checkpointed_iteration.txt") && Clock::now() < deadline &&
           running(pid))
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    // run_s includes the start-up, already behind us here: half of it covers the remaining saves.
    std::uniform_real_distribution<double> delay(0.0, 0.5 * run_s);
    std::this_thread::sleep_for(std::chrono::duration<double>(delay(rng)));
    kill(pid, SIGKILL);  // harmless if it already exited: it stays a zombie until reaped
    status = reap(pid, 30);
    ASSERT_NE(status, -1);
    for (const auto& e : fs::directory_iterator(save))  // a half-written iter_*.tmp: killed inside a save
      if (e.path().extension() == ".tmp") {
        ++mid_save;
        break;
      }

    const int64_t k = load_and_verify(base, save);
    ASSERT_GE(k, 1) << "try " << tries;
    ASSERT_LE(k, N);
    // Resume into a fresh directory so its metrics.jsonl holds only the iterations after k.
    const std::string resumed = save + "_resumed";
    pid = spawn(plus(base, {"--train-iters", iters, "--load", save, "--save", resumed}), resumed + ".log");
    ASSERT_GT(pid, 0);
    status = reap(pid, 60);
    ASSERT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(resumed + ".log");
    if (k == N) continue;
    const auto got = losses(resumed + "/metrics.jsonl");
    ASSERT_EQ(got.size(), static_cast<size_t>(N - k)) << "try " << tries << ", resumed at " << k;
    for (const auto& [it, loss] : got) {
      ASSERT_TRUE(want.count(it)) << "iteration " << it;
      EXPECT_EQ(loss, want.at(it)) << "try " << tries << ", resumed at " << k << ", iteration " << it;  // bitwise
    }
    EXPECT_EQ(file_checksum(resolve_checkpoint_dir(resumed) + "/model.safetensors"),
              file_checksum(resolve_checkpoint_dir(ref) + "/model.safetensors"))
        << "final weights, try " << tries;
  }
  EXPECT_GE(tries, 2);
  // Informational only (depends on timing): how many kills landed inside a save.
  std::printf("[ info     ] %d kills, %d inside a save\n", tries, mid_save);
}

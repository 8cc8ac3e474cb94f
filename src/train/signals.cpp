// Exit requests taken synchronously, with an async-signal-safe fallback handler: see signals.h.
#include "train/signals.h"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <vector>

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "core/error.h"

namespace megadlm {

namespace {

// A handler may only touch lock-free atomics (or volatile sig_atomic_t); this is checked at compile
// time so a platform where int atomics take a lock fails to build rather than deadlock at runtime.
std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free, "exit-signal flag must be lock-free");

struct Installed {
  int signum;
  struct sigaction previous;
};
std::vector<Installed> g_installed;  // touched only by install/uninstall, never by the handler
sigset_t g_set;                      // the signals installed for
sigset_t g_previous_mask;            // the installing thread's mask before install
bool g_masked = false;

// Keeps the first signal: a second SIGINT while saving must not change the reason logged.
void record(int signum) {
  int expected = 0;
  g_received.compare_exchange_strong(expected, signum, std::memory_order_relaxed);
}

extern "C" void on_exit_signal(int signum) { record(signum); }

struct Named {
  const char* name;
  int signum;
};
constexpr Named kSignals[] = {{"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},   {"SIGHUP", SIGHUP},
                              {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGQUIT", SIGQUIT}};

}  // namespace

int parse_signal_name(const std::string& name) {
  for (const Named& s : kSignals)
    if (name == s.name || name == std::string(s.name).substr(3)) return s.signum;
  if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos && name.size() < 4) {
    const int n = std::atoi(name.c_str());
    // SIGKILL and SIGSTOP cannot be caught; 0 is not a signal.
    if (n > 0 && n < NSIG && n != SIGKILL && n != SIGSTOP) return n;
  }
  fail("--exit-signal: '", name, "' is not a catchable signal (SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, ",
       "SIGQUIT, or a number)");
}

std::string signal_name(int signum) {
  for (const Named& s : kSignals)
    if (s.signum == signum) return s.name;
  return "signal " + std::to_string(signum);
}

void install_exit_signal_handlers(int signum) {
  uninstall_exit_signal_handlers();
  g_received.store(0);
  std::vector<int> sigs = {signum};
  if (signum != SIGINT) sigs.push_back(SIGINT);
  sigemptyset(&g_set);
  for (int s : sigs) sigaddset(&g_set, s);
  // Block first: from here on these signals wait, pending, for exit_signal_received().
  const int rc = pthread_sigmask(SIG_BLOCK, &g_set, &g_previous_mask);
  MEGADLM_CHECK(rc == 0, "cannot block ", signal_name(signum), " and SIGINT (pthread_sigmask: ", rc, ")");
  g_masked = true;
  for (int s : sigs) {
    struct sigaction sa {};
    sa.sa_handler = on_exit_signal;
    sigemptyset(&sa.sa_mask);
    // SA_RESTART: a signal landing in a read or fsync must not turn into an EINTR error mid-save.
    sa.sa_flags = SA_RESTART;
    Installed in{s, {}};
    MEGADLM_CHECK(sigaction(s, &sa, &in.previous) == 0, "cannot install a handler for ", signal_name(s));
    g_installed.push_back(in);
  }
}

void uninstall_exit_signal_handlers() {
  // Signals that arrived while installed are consumed first: the run already stops for the first one,
  // and a second SIGTERM during the final save must not kill the process once the mask is restored.
  (void)exit_signal_received();
  for (const Installed& in : g_installed) sigaction(in.signum, &in.previous, nullptr);
  g_installed.clear();
  if (g_masked) {
    pthread_sigmask(SIG_SETMASK, &g_previous_mask, nullptr);
    g_masked = false;
  }
}

int exit_signal_received() {
  if (g_masked) {
    // Collect what is pending (blocked here, or in every thread started since install), without waiting.
    const struct timespec zero = {0, 0};
    int s;
    while ((s = sigtimedwait(&g_set, nullptr, &zero)) > 0) record(s);
  }
  return g_received.load(std::memory_order_relaxed);
}

}  // namespace megadlm

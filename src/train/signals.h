#pragma once
// --exit-signal-handler: a signal (SIGTERM by default, --exit-signal) or SIGINT asks the trainer to
// stop cleanly: the training loop polls once per iteration, after the step, then saves a checkpoint
// and returns normally. Without the flag nothing is installed and the default disposition
// (terminate) applies.
//
// The signals are taken synchronously: install_exit_signal_handlers() blocks them in the calling
// thread, so the threads it creates afterwards (OpenMP workers, the data loader) inherit the block,
// and exit_signal_received() collects a pending one with a zero-timeout sigtimedwait(). No handler
// interrupts the computation, which rules out the glibc heap corruption that an asynchronous handler,
// even one that only sets a flag (or does nothing), can bring about in a training run; the code at
// fault is not identified (docs/robustness.md).
// A flag-setting handler stays installed as the fallback for threads that existed before and do not
// block the signals.
#include <string>

namespace megadlm {

// The signal number for a name ("SIGTERM", "TERM", "SIGUSR1", ...) or a decimal number. Throws Error
// naming `name` when it is neither a catchable signal name nor a number in range.
int parse_signal_name(const std::string& name);
std::string signal_name(int signum);  // "SIGTERM", or "signal 42" for one without a known name

// Blocks `signum` and SIGINT in the calling thread and installs the flag-setting fallback handler;
// clears any earlier request. Idempotent; the previous mask and dispositions are kept so that
// uninstall_exit_signal_handlers() can restore them.
void install_exit_signal_handlers(int signum);
// Restores the dispositions, then the calling thread's mask: a signal still pending then takes its
// restored (default) action, as one arriving after the uninstall would.
void uninstall_exit_signal_handlers();

// The number of the first signal received since install, or 0. Call it from the thread that
// installed (it collects signals pending there); a signal that reached another thread through the
// fallback handler is seen too.
int exit_signal_received();

// Installs for its lifetime when `on` (a Trainer holds one from its construction on, so that the
// threads it starts inherit the block).
class ExitSignalScope {
 public:
  ExitSignalScope(bool on, int signum) : on_(on) {
    if (on_) install_exit_signal_handlers(signum);
  }
  ~ExitSignalScope() {
    if (on_) uninstall_exit_signal_handlers();
  }
  ExitSignalScope(const ExitSignalScope&) = delete;
  ExitSignalScope& operator=(const ExitSignalScope&) = delete;

 private:
  bool on_;
};

}  // namespace megadlm

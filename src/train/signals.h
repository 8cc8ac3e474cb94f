#pragma once
// --exit-signal-handler: a signal (SIGTERM by default, --exit-signal) or SIGINT asks the trainer to
// stop cleanly. The handler only records the signal number in a lock-free atomic (the one thing a
// handler may safely do); the training loop polls it once per iteration, after the step, then saves
// a checkpoint and returns normally. Without the flag nothing is installed and the default
// disposition (terminate) applies.
#include <string>

namespace megadlm {

// The signal number for a name ("SIGTERM", "TERM", "SIGUSR1", ...) or a decimal number. Throws Error
// naming `name` when it is neither a catchable signal name nor a number in range.
int parse_signal_name(const std::string& name);
std::string signal_name(int signum);  // "SIGTERM", or "signal 42" for one without a known name

// Installs the flag-setting handler for `signum` and SIGINT, and clears any earlier request.
// Idempotent; the previous dispositions are kept so uninstall_exit_signal_handlers() can restore them.
void install_exit_signal_handlers(int signum);
void uninstall_exit_signal_handlers();

// The number of the first signal received since install, or 0. Safe to call from any thread.
int exit_signal_received();

}  // namespace megadlm

#pragma once
// Minimal logging to stderr with a timestamp, and a wall-clock timer.
#include <chrono>
#include <string>

#include "core/error.h"

namespace megadlm {

void log_line(const std::string& line);  // "[2026-11-30 03:04:05] line"

template <typename... Args>
void log_info(const Args&... args) {
  log_line(detail::concat(args...));
}

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace megadlm

#include "core/log.h"

#include <cstdio>
#include <ctime>

namespace megadlm {

void log_line(const std::string& line) {
  std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  std::fprintf(stderr, "[%s] %s\n", stamp, line.c_str());
  std::fflush(stderr);
}

}  // namespace megadlm

#include "core/host_memory.h"

#include <fstream>
#include <string>

namespace megadlm {

double available_host_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kb = 0;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024.0;
  return 0;
}

}  // namespace megadlm

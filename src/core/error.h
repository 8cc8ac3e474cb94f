#pragma once
// One exception type for every failure the user can cause (bad flag, bad file, bad shape). Messages
// name the value at fault; `main` catches Error, prints what() and exits non-zero.
#include <sstream>
#include <stdexcept>
#include <string>

namespace megadlm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// Throws Error with the pieces streamed together: fail("--hidden-size ", h, " is not divisible by ...").
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(detail::concat(args...));
}

}  // namespace megadlm

// MEGADLM_CHECK(cond, pieces...): throws megadlm::Error naming the pieces when cond is false.
#define MEGADLM_CHECK(cond, ...)                       \
  do {                                                 \
    if (!(cond)) ::megadlm::fail(__VA_ARGS__);         \
  } while (0)

// Two kinds of failure: `Error` for bad user input (config, files), whose message says what to fix, and CS_CHECK
// for broken invariants inside the library, which names the file and line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace cornstarch {

// A user-facing error: the message names the config key or file and what was expected.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const std::string& msg);

inline std::string StrCat() { return ""; }
template <class... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

}  // namespace cornstarch

// Invariant check: throws std::logic_error("file:line: check `cond` failed: msg").
#define CS_CHECK(cond, ...)                                                                       \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      ::cornstarch::detail::CheckFailed(__FILE__, __LINE__, #cond,                                \
                                        ::cornstarch::detail::StrCat(__VA_ARGS__));               \
    }                                                                                             \
  } while (0)

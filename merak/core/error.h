// Errors: one exception type carrying where the check failed and what was wrong.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace merak {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
// Streams every argument into one string: MERAK_CHECK(x > 0, "x=", x) -> "x=3".
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace merak

#define MERAK_CHECK(cond, ...)                                                        \
  do {                                                                               \
    if (!(cond))                                                                     \
      ::merak::detail::throw_error(__FILE__, __LINE__,                               \
                                   ::merak::detail::concat(__VA_ARGS__));            \
  } while (0)

#define MERAK_FAIL(...) \
  ::merak::detail::throw_error(__FILE__, __LINE__, ::merak::detail::concat(__VA_ARGS__))

#pragma once
// Errors. TIDAL_CHECK reports a user mistake (bad shape, bad flag, missing file): it throws
// tidal::Error with a message that names the op and what was wrong. TIDAL_ASSERT guards our own
// invariants: it throws tidal::InternalError, which says it is a bug. Library code never aborts.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tidal {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A broken invariant inside tidal (a bug, not a user mistake).
class InternalError : public Error {
 public:
  using Error::Error;
};

namespace detail {

template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

[[noreturn]] void throw_error(std::string message);
[[noreturn]] void throw_internal(const char* file, int line, const char* cond, std::string message);

}  // namespace detail
}  // namespace tidal

#define TIDAL_CHECK(cond, ...)                                             \
  do {                                                                     \
    if (!(cond)) [[unlikely]]                                              \
      ::tidal::detail::throw_error(::tidal::detail::str_cat(__VA_ARGS__)); \
  } while (0)

#define TIDAL_ASSERT(cond, ...)                                                                 \
  do {                                                                                          \
    if (!(cond)) [[unlikely]]                                                                   \
      ::tidal::detail::throw_internal(__FILE__, __LINE__, #cond,                                \
                                      ::tidal::detail::str_cat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)

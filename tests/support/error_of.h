#pragma once
// The message of the tidal::Error that f() throws, or "no error": for tests of error messages.
#include <functional>
#include <string>

#include "tidal/base/error.h"

namespace tidal::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace tidal::testing

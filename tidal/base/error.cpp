#include "tidal/base/error.h"

namespace tidal::detail {

void throw_error(std::string message) { throw Error(std::move(message)); }

void throw_internal(const char* file, int line, const char* cond, std::string message) {
  std::string text =
      str_cat("internal error (a bug in tidal, please report it): ", cond, " failed at ", file, ":", line);
  if (!message.empty()) text += ": " + message;
  throw InternalError(text);
}

}  // namespace tidal::detail

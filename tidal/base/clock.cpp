#include "tidal/base/clock.h"

#include <chrono>

namespace tidal {

int64_t now_ns() {
  using clock = std::chrono::steady_clock;
  static const clock::time_point start = clock::now();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start).count();
}

}  // namespace tidal

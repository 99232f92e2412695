#pragma once
// One monotonic clock for memory events, stream events and the profiler: nanoseconds since the
// first call in this process.
#include <cstdint>

namespace tidal {
int64_t now_ns();
}  // namespace tidal

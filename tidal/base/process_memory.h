#pragma once
// What the operating system says this process holds: its peak resident set (what `top` and a container's
// memory limit count: tidal's allocators' pools, the code, the libraries' own buffers, all of it).
#include <cstdint>

namespace tidal {

// The process's peak resident set size in bytes (Linux: VmHWM of /proc/self/status, else getrusage's
// ru_maxrss); 0 when neither says.
int64_t peak_rss_bytes();

}  // namespace tidal

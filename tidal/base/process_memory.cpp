#include "tidal/base/process_memory.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstring>

namespace tidal {

int64_t peak_rss_bytes() {
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    long long kib = -1;
    while (std::fgets(line, sizeof line, f) != nullptr)
      if (std::strncmp(line, "VmHWM:", 6) == 0 && std::sscanf(line + 6, "%lld", &kib) == 1) break;
    std::fclose(f);
    if (kib >= 0) return int64_t(kib) * 1024;
  }
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) == 0 && u.ru_maxrss > 0) return int64_t(u.ru_maxrss) * 1024;  // KiB on Linux
  return 0;
}

}  // namespace tidal

#include <cstdio>
#include <thread>

#include "tidal/allocator.h"
#include "tidal/base/threads.h"
#include "tidal/seam/kernels.h"
#include "tools/tidal/cli.h"

namespace tidal::cli {

int run_info(const std::vector<std::string>& argv) {
  Flags flags("info");
  if (parse_or_help(flags, argv, "   (build and machine facts: BLAS, threads, device memory limit)")) return kOk;
  const int64_t limit = device_allocator(Device::cpu()).limit();
  std::printf("tidal 0.1.0\n");
  std::printf("  devices        cpu, meta\n");
  std::printf("%s", device_kernels(Device::cpu()).describe().c_str());
  std::printf("  threads        %d kernel threads (OpenMP), %u hardware threads\n", num_threads(),
              std::thread::hardware_concurrency());
  std::printf("  device memory  %s\n", limit > 0 ? (format_bytes(limit) + " limit (TIDAL_DEVICE_MEMORY)").c_str()
                                                 : "no limit (set TIDAL_DEVICE_MEMORY to emulate a smaller device)");
  return kOk;
}

}  // namespace tidal::cli

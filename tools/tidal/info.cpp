#include <cstdio>
#include <string>
#include <thread>

#include "tidal/allocator.h"
#include "tidal/base/threads.h"
#include "tidal/seam/kernels.h"
#include "tidal/seam/registry.h"
#include "tools/tidal/cli.h"

namespace tidal::cli {

namespace {

// TIDAL_DEVICE_MEMORY caps every device allocator; a cuda device is also bounded by its GPU (describe()).
// TIDAL_DEVICE_CACHE says whether its cache goes back before the reserve grows and whether large cached blocks
// split (allocator.h).
std::string limit_line(Device device) {
  Allocator& a = device_allocator(device);
  const int64_t limit = a.limit();
  const std::string cache = a.releases_before_growing()
                                ? "; cache given back before the reserve grows past its peak (TIDAL_DEVICE_CACHE)"
                                : "; cache kept (TIDAL_DEVICE_CACHE=release gives it back before growing)";
  const std::string split =
      a.splits_large_blocks() ? "; large cached blocks split for smaller requests" : "; cached blocks reused whole";
  return (limit > 0
              ? format_bytes(limit) + " limit (TIDAL_DEVICE_MEMORY)"
              : std::string(device.is_cuda() ? "no limit beyond the GPU's memory (TIDAL_DEVICE_MEMORY caps it)"
                                             : "no limit (set TIDAL_DEVICE_MEMORY to emulate a smaller device)")) +
         cache + split;
}

}  // namespace

int run_info(const std::vector<std::string>& argv) {
  Flags flags("info");
  if (parse_or_help(flags, argv, "   (build and machine facts: backends, BLAS, threads, device memory limits)"))
    return kOk;
  const std::vector<DeviceType> types = registered_device_types();
  std::string names;
  for (DeviceType t : types) names += (names.empty() ? "" : ", ") + std::string(device_type_name(t));
  std::printf("tidal 0.1.0\n");
  std::printf("  devices        %s\n", names.c_str());
  // Each backend's own line(s): the CPU's BLAS and vector ISA, the meta device's cost model, the CUDA
  // backend's GPUs or why there is none (nothing CUDA runs unless that backend is linked in).
  for (DeviceType t : types) std::printf("%s", device_kernels(Device{t, 0}).describe().c_str());
  std::printf("  threads        %d kernel threads (OpenMP), %u hardware threads\n", num_threads(),
              std::thread::hardware_concurrency());
  std::printf("  device memory  %s\n", limit_line(Device::cpu()).c_str());
  for (DeviceType t : types)
    if (t == DeviceType::cuda) std::printf("  cuda memory    %s\n", limit_line(Device::cuda(0)).c_str());
  return kOk;
}

}  // namespace tidal::cli

// The registry of backends (registry.h): filled while the program starts, read-only afterwards.
#include "tidal/seam/registry.h"

#include <array>

#include "tidal/base/error.h"
#include "tidal/seam/cost.h"

namespace tidal {
namespace {

struct Backend {
  Kernels* kernels = nullptr;
  DeviceRuntime* runtime = nullptr;
  std::vector<const char*> missing;  // the kernels it does not define
};

std::array<Backend, kNumDeviceTypes>& backends() {
  static std::array<Backend, kNumDeviceTypes> b;
  return b;
}

[[noreturn]] void unregistered(Device device, const char* what) {
  detail::throw_error(detail::str_cat("[backend] no ", what, " registered for device ", device,
                                      ": its backend (tidal/backend/", device_type_name(device.type),
                                      "/) is not linked in",
                                      device.is_cuda() ? " (build with -DTIDAL_CUDA=ON where the CUDA toolkit is "
                                                         "installed: docs/cuda.md)"
                                                       : ""));
}

}  // namespace

namespace detail {

void register_kernels(DeviceType type, Kernels& kernels, std::vector<const char*> missing) {
  Backend& b = backends()[size_t(type)];
  TIDAL_ASSERT(b.kernels == nullptr, "two backends registered kernels for device ", Device{type, 0});
  b.kernels = &kernels;
  b.missing = std::move(missing);
}

void register_runtime(DeviceType type, DeviceRuntime& runtime) {
  Backend& b = backends()[size_t(type)];
  TIDAL_ASSERT(b.runtime == nullptr, "two backends registered a runtime for device ", Device{type, 0});
  b.runtime = &runtime;
}

}  // namespace detail

Kernels& device_kernels(Device device) {
  Kernels* k = backends()[size_t(device.type)].kernels;
  if (k == nullptr) [[unlikely]]
    unregistered(device, "kernels");
  return *k;
}

DeviceRuntime& device_runtime(Device device) {
  DeviceRuntime* r = backends()[size_t(device.type)].runtime;
  if (r == nullptr) [[unlikely]]
    unregistered(device, "runtime");
  return *r;
}

Kernels* kernels_for(Device device) {
  if (device.is_meta() && !cost_sink_installed()) return nullptr;
  return &device_kernels(device);
}

std::vector<DeviceType> registered_device_types() {
  std::vector<DeviceType> types;
  for (int t = 0; t < kNumDeviceTypes; ++t)
    if (backends()[size_t(t)].kernels != nullptr) types.push_back(DeviceType(t));
  return types;
}

std::vector<const char*> missing_kernels(DeviceType type) {
  const Backend& b = backends()[size_t(type)];
  if (b.kernels == nullptr) unregistered(Device{type, 0}, "kernels");
  return b.missing;
}

void Kernels::missing(const char* kernel) const {
  detail::throw_error(detail::str_cat("[backend] no ", name(), " kernel for ", kernel, ": the ", name(),
                                      " backend does not define it yet (tests/unit/seam/missing_kernels_test.cpp "
                                      "lists what each backend lacks)"));
}

}  // namespace tidal

// Which kernels and runtime serve which device: the one table a new backend adds itself to.
#include "tidal/backend/cpu/kernels.h"
#include "tidal/backend/cpu/runtime.h"
#include "tidal/backend/meta/cost_kernels.h"
#include "tidal/backend/meta/runtime.h"
#include "tidal/seam/kernels.h"
#include "tidal/seam/runtime.h"
#include "tidal/tensor.h"

namespace tidal {

Kernels& device_kernels(Device device) {
  switch (device.type) {
    case DeviceType::cpu:
    case DeviceType::meta:  // planned as the cpu: its layout rules, never its kernels
      return cpu::kernels();
  }
  detail::throw_error(detail::str_cat("[backend] no kernels for device ", device));
}

DeviceRuntime& device_runtime(Device device) {
  switch (device.type) {
    case DeviceType::cpu: return cpu::runtime();
    case DeviceType::meta: return meta::runtime();
  }
  detail::throw_error(detail::str_cat("[backend] no runtime for device ", device));
}

// A meta tensor runs nothing, or, while a cost sink is installed (meta/cost_kernels.h), the kernels
// that report what they would compute.
Kernels* kernels_for(const Tensor& out) {
  if (!out.is_meta()) return &device_kernels(out.device());
  return cost_sink_installed() ? &meta::cost_kernels() : nullptr;
}

}  // namespace tidal

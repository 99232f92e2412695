// Which kernels and runtime serve which device: the one table a new backend adds itself to.
#include "tidal/backend/cpu/kernels.h"
#include "tidal/backend/cpu/runtime.h"
#include "tidal/backend/kernels.h"
#include "tidal/backend/meta/runtime.h"
#include "tidal/backend/runtime.h"
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

Kernels* kernels_for(const Tensor& out) { return out.is_meta() ? nullptr : &device_kernels(out.device()); }

}  // namespace tidal

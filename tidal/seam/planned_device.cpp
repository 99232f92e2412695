#include "tidal/seam/planned_device.h"

#include <atomic>

#include "tidal/base/error.h"
#include "tidal/seam/registry.h"

namespace tidal {
namespace {

std::atomic<DeviceType> g_planned{DeviceType::cpu};

bool registered(DeviceType type) {
  for (DeviceType t : registered_device_types())
    if (t == type) return true;
  return false;
}

}  // namespace

DeviceType planned_device() { return g_planned.load(); }

Kernels& planned_kernels() { return device_kernels(Device{planned_device(), 0}); }

PlanFor::PlanFor(DeviceType type) : saved_(g_planned.load()) {
  if (type == DeviceType::meta) type = DeviceType::cpu;  // a meta run planned as such: the cpu's rules
  TIDAL_CHECK(registered(type), "cannot plan for ", device_type_name(type), ": this tidal was built without its ",
              "backend (rebuild with it, e.g. -DTIDAL_CUDA=ON, or plan for the cpu)");
  g_planned.store(type);
}

PlanFor::~PlanFor() { g_planned.store(saved_); }

}  // namespace tidal

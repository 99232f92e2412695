#pragma once
// The CPU backend's DeviceRuntime (seam/runtime.h), registered in backend/registry.cpp.
#include "tidal/seam/runtime.h"

namespace tidal::cpu {

DeviceRuntime& runtime();

}  // namespace tidal::cpu

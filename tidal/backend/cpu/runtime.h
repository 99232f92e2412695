#pragma once
// The CPU backend's DeviceRuntime (backend/runtime.h), registered in backend/registry.cpp.
#include "tidal/backend/runtime.h"

namespace tidal::cpu {

DeviceRuntime& runtime();

}  // namespace tidal::cpu

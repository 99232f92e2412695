#pragma once
// The meta device's DeviceRuntime: fake addresses (accounted, never touched) and the streams of the
// device it stands in for (the cpu). It has no kernels: backend/kernels.h's kernels_for skips it.
#include "tidal/backend/runtime.h"

namespace tidal::meta {

DeviceRuntime& runtime();

}  // namespace tidal::meta

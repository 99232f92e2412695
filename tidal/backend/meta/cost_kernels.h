#pragma once
// The meta device's cost-recording kernel table (tidal/backend/cost.h; Note [Cost kernels] in the
// .cpp). registry.cpp's kernels_for hands it out for meta tensors while a cost sink is installed.
#include "tidal/seam/cost.h"
#include "tidal/seam/kernels.h"

namespace tidal::meta {

// Layout rules: the cpu's, as device_kernels(meta).
Kernels& cost_kernels();

}  // namespace tidal::meta

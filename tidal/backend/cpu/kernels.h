#pragma once
// The CPU backend's kernel table (backend/kernels.h), registered in backend/registry.cpp.
#include "tidal/backend/kernels.h"

namespace tidal::cpu {

Kernels& kernels();

}  // namespace tidal::cpu

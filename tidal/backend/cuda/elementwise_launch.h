#pragma once
// The elementwise family's launchers (elementwise.cu), called by elementwise.cpp.
#include <cuda_runtime_api.h>

#include "tidal/backend/cuda/strided.h"

namespace tidal::cuda {

// dst[i] = value (converted to dst's dtype; bf16 rounded to nearest even), over dst's n elements.
void launch_fill(cudaStream_t stream, const Strided& dst, int64_t n, double value);

}  // namespace tidal::cuda

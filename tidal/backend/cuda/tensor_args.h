#pragma once
// From Tensors to the plain arguments the launchers take (strided.h), with the checks every kernel
// needs: a tensor on a CUDA device, at most kMaxDims dims.
#include "tidal/backend/cuda/strided.h"
#include "tidal/shape.h"

namespace tidal {
class Tensor;
}

namespace tidal::cuda {

// `t` viewed with `out_shape`'s dims (broadcast: right-aligned, stride 0 where t has size 1 or lacks
// the dim). Dims of size 1 are dropped and contiguous runs merged, so most calls index one dim.
Strided strided(const Tensor& t, const Shape& out_shape);
// The same view without the device check (data: the tensor's, wherever it lives): what strided() builds,
// testable on cpu tensors (tests/cuda/backend/cuda/strided_test.cpp runs without a GPU).
Strided strided_view(const Tensor& t, const Shape& out_shape);
Strided strided(const Tensor& t);  // its own shape

// Typed data pointers of a tensor on a CUDA device (checked).
void* device_data(const Tensor& t);

}  // namespace tidal::cuda

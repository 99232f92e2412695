#pragma once
// Shape ops. Views (view, reshape when possible, transpose, permute, narrow, select, expand,
// squeeze/unsqueeze, split/chunk) share storage with their input; cat and stack copy.
// Every op is differentiable and works on meta tensors.
#include <vector>

#include "tidal/tensor.h"

namespace tidal {

Tensor view(const Tensor& t, Shape shape);     // one dim may be -1
Tensor reshape(const Tensor& t, Shape shape);  // view when the strides allow, else a copy
Tensor transpose(const Tensor& t, int64_t d0, int64_t d1);
Tensor permute(const Tensor& t, const std::vector<int64_t>& dims);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& t, int64_t dim, int64_t index);
Tensor expand(const Tensor& t, const Shape& shape);  // -1 keeps a dim
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor flatten(const Tensor& t, int64_t start = 0, int64_t end = -1);

// Views of consecutive pieces along `dim` with the given sizes (they must add up to the dim).
std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int64_t dim);
// `chunks` equal pieces (the dim must divide evenly).
std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);

// A new (uninitialized, no history) tensor of t's shape laid out in t's memory order: the outer dims
// ordered by t's strides (stable for ties), the last dim innermost. Gradients of strided views use
// it so they come back in their input's layout.
Tensor empty_like_layout(const Tensor& t, DType dtype);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);

}  // namespace tidal

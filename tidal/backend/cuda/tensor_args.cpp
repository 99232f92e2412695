#include "tidal/backend/cuda/tensor_args.h"

#include "tidal/base/error.h"
#include "tidal/tensor.h"

namespace tidal::cuda {

void* device_data(const Tensor& t) {
  TIDAL_ASSERT(t.defined() && t.device().is_cuda(), "[cuda] a kernel got a tensor on ",
               t.defined() ? t.device().str() : std::string("no device"), ", not a CUDA device");
  return t.raw_data();
}

Strided strided(const Tensor& t, const Shape& out_shape) {
  device_data(t);  // checks the device
  return strided_view(t, out_shape);
}

Strided strided_view(const Tensor& t, const Shape& out_shape) {
  const Shape& sizes = t.shape();
  const Shape& strides = t.strides();
  TIDAL_ASSERT(sizes.size() <= out_shape.size(), "[cuda] cannot broadcast ", sizes, " to ", out_shape);
  Strided s;
  s.data = t.raw_data();
  s.dtype = t.dtype();
  // Right-aligned broadcast, size-1 output dims dropped, then runs that are contiguous for this tensor
  // merged (the row-major index decomposes the same way over merged dims).
  int64_t dim_sizes[kMaxDims * 2], dim_strides[kMaxDims * 2];
  int n = 0;
  const int lead = out_shape.size() - sizes.size();
  for (int d = 0; d < out_shape.size(); ++d) {
    const int64_t size = out_shape[d];
    if (size == 1) continue;
    const int td = d - lead;
    int64_t stride = 0;
    if (td >= 0) {
      TIDAL_ASSERT(sizes[td] == size || sizes[td] == 1, "[cuda] cannot broadcast ", sizes, " to ", out_shape);
      stride = sizes[td] == 1 ? 0 : strides[td];
    }
    if (n > 0 && dim_strides[n - 1] == stride * size) {
      dim_sizes[n - 1] *= size;
      dim_strides[n - 1] = stride;
      continue;
    }
    dim_sizes[n] = size;
    dim_strides[n] = stride;
    ++n;
  }
  TIDAL_CHECK(n <= kMaxDims, "[cuda] a tensor of ", out_shape.size(), " dims that cannot be merged into ", kMaxDims,
              ": make it contiguous first");
  s.ndim = n;
  for (int d = 0; d < n; ++d) {
    s.sizes[d] = dim_sizes[d];
    s.strides[d] = dim_strides[d];
  }
  return s;
}

Strided strided(const Tensor& t) { return strided(t, t.shape()); }

}  // namespace tidal::cuda

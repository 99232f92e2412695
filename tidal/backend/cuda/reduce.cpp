// The reduction family's methods of CudaKernels (sum, max, max_backward): checks and arguments, then
// reduce.cu's launchers.
#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/reduce_launch.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/base/error.h"
#include "tidal/tensor.h"

namespace tidal::cuda {
namespace {

void check_block(const char* kernel, const Tensor& x, int64_t outer, int64_t n, int64_t inner) {
  TIDAL_ASSERT(x.is_contiguous() && x.numel() == outer * n * inner, "[cuda] ", kernel, " needs a contiguous (", outer,
               ", ", n, ", ", inner, ") input, got ", x.shape());
}

}  // namespace

void CudaKernels::sum(Stream& stream, const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner,
                      double scale) {
  check_block("sum", x, outer, n, inner);
  TIDAL_ASSERT(out.is_contiguous() && out.numel() == outer * inner && out.dtype() == x.dtype(),
               "[cuda] sum's output must be contiguous (outer, inner) of the input's dtype");
  launch_sum(stream_handle(stream), x.dtype(), device_data(out), device_data(x), outer, n, inner, scale);
}

void CudaKernels::max(Stream& stream, const Tensor& values, const Tensor& indices, const Tensor& x, int64_t outer,
                      int64_t n, int64_t inner) {
  check_block("max", x, outer, n, inner);
  TIDAL_ASSERT(n > 0, "[cuda] max over an empty dim");
  TIDAL_ASSERT(values.is_contiguous() && indices.is_contiguous() && values.numel() == outer * inner &&
                   indices.numel() == outer * inner && values.dtype() == x.dtype() && indices.dtype() == DType::i64,
               "[cuda] max's values/indices must be contiguous (outer, inner), indices i64");
  launch_max(stream_handle(stream), x.dtype(), device_data(values), static_cast<int64_t*>(device_data(indices)),
             device_data(x), outer, n, inner);
}

void CudaKernels::max_backward(Stream& stream, const Tensor& grad_in, const Tensor& g, const Tensor& indices,
                               int64_t outer, int64_t n, int64_t inner) {
  check_block("max_backward", grad_in, outer, n, inner);
  TIDAL_ASSERT(g.is_contiguous() && indices.is_contiguous() && g.numel() == outer * inner &&
                   indices.numel() == outer * inner && g.dtype() == grad_in.dtype() && indices.dtype() == DType::i64,
               "[cuda] max_backward's g/indices must be contiguous (outer, inner), indices i64");
  launch_max_backward(stream_handle(stream), g.dtype(), device_data(grad_in), device_data(g),
                      static_cast<const int64_t*>(device_data(indices)), outer, n, inner);
}

}  // namespace tidal::cuda

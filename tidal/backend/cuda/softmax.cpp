// The softmax family's methods of CudaKernels (softmax, log_softmax and the eager attention's scaled
// masked softmax): checks and arguments, then softmax.cu's launchers.
#include <algorithm>

#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/softmax_launch.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/base/error.h"
#include "tidal/tensor.h"

namespace tidal::cuda {
namespace {

void check_dense(const char* kernel, const Tensor& ref, const Tensor& t) {
  TIDAL_ASSERT(t.is_contiguous() && t.numel() == ref.numel() && t.dtype() == ref.dtype(), "[cuda] ", kernel,
               " needs contiguous tensors of one dtype and size, got ", t.shape(), " ", t.dtype(), " against ",
               ref.shape(), " ", ref.dtype());
}

}  // namespace

void CudaKernels::softmax_forward(Stream& stream, const Tensor& out, const Tensor& x, const SoftmaxArgs& a) {
  check_dense("softmax", out, out);
  check_dense("softmax", out, x);
  TIDAL_ASSERT(x.numel() == a.outer * a.n * a.inner, "[cuda] softmax: (outer, n, inner) does not cover ", x.shape());
  launch_softmax_forward(stream_handle(stream), x.dtype(), device_data(out), device_data(x), a.outer, a.n, a.inner,
                         a.log);
}

void CudaKernels::softmax_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& y,
                                   const SoftmaxArgs& a) {
  check_dense("softmax_backward", y, y);
  check_dense("softmax_backward", y, g);
  check_dense("softmax_backward", y, dx);
  TIDAL_ASSERT(y.numel() == a.outer * a.n * a.inner, "[cuda] softmax_backward: (outer, n, inner) does not cover ",
               y.shape());
  launch_softmax_backward(stream_handle(stream), y.dtype(), device_data(dx), device_data(g), device_data(y), a.outer,
                          a.n, a.inner, a.log);
}

void CudaKernels::scaled_masked_softmax_forward(Stream& stream, const Tensor& probs, const Tensor& scores,
                                                const MaskedSoftmaxArgs& a) {
  check_dense("scaled_masked_softmax", scores, scores);
  check_dense("scaled_masked_softmax", scores, probs);
  TIDAL_ASSERT(scores.dim() >= 2, "[cuda] scaled_masked_softmax needs (..., T, S) scores, got ", scores.shape());
  const int64_t t_len = scores.size(-2), s_len = scores.size(-1);
  const int64_t rows = scores.numel() / std::max<int64_t>(s_len, 1);
  launch_scaled_masked_softmax_forward(
      stream_handle(stream), scores.dtype(), device_data(probs), device_data(scores), rows, t_len, s_len, a.scale,
      a.causal, a.window,
      DocSpan{a.documents.start, a.documents.stride_b, a.documents.stride_t, a.documents.key_offset},
      std::max<int64_t>(1, rows / std::max<int64_t>(a.batch, 1)));
}

void CudaKernels::scaled_masked_softmax_backward(Stream& stream, const Tensor& grad_scores, const Tensor& grad_probs,
                                                 const Tensor& probs, double scale) {
  check_dense("scaled_masked_softmax_backward", probs, probs);
  check_dense("scaled_masked_softmax_backward", probs, grad_probs);
  check_dense("scaled_masked_softmax_backward", probs, grad_scores);
  TIDAL_ASSERT(probs.dim() >= 1, "[cuda] scaled_masked_softmax_backward needs (..., T, S) probs");
  const int64_t s_len = probs.size(-1), rows = probs.numel() / std::max<int64_t>(s_len, 1);
  launch_scaled_masked_softmax_backward(stream_handle(stream), probs.dtype(), device_data(grad_scores),
                                        device_data(grad_probs), device_data(probs), rows, s_len, scale);
}

}  // namespace tidal::cuda

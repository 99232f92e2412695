// The chunked LM loss on CUDA (tidal/backend/cpu/chunked_loss.cpp's algorithm): per chunk of rows, the
// LM-head product through this backend's matmul, each row's cross-entropy and gradient in place
// (loss.cu), then the two products into the gradients of the chunk's hidden rows and of the weight.
#include <algorithm>

#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/loss_launch.h"
#include "tidal/backend/cuda/scratch.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/tensor.h"

namespace tidal::cuda {

int64_t CudaKernels::count_not_ignored(Stream& stream, const Tensor& targets, int64_t ignore_index) {
  TIDAL_ASSERT(targets.is_contiguous(), "count_not_ignored needs contiguous targets");
  if (targets.numel() == 0) return 0;
  Tensor scratch = scratch_bytes(targets.device(), sizeof(int64_t));
  return launch_count_not_ignored(stream_handle(stream), device_data(targets), targets.dtype(), targets.numel(),
                                  ignore_index, static_cast<int64_t*>(device_data(scratch)));
}

// The CPU's GEMMs, as views: logits (n, V) = h_c W^T; grad_hidden_c (n, C) = dlogits W;
// grad_weight (V, C) (+)= dlogits^T h_c (beta 0 for the first chunk). The loss sum: row order, on the host.
double CudaKernels::chunked_lm_loss_forward(Stream& stream, const Tensor& hidden, const Tensor& weight,
                                            const Tensor& targets, const Tensor& logits, const Tensor& row_loss,
                                            const Tensor& grad_hidden, const Tensor& grad_weight,
                                            const ChunkedLossArgs& a) {
  const DType dt = hidden.dtype();
  TIDAL_ASSERT(dt == DType::f32 || dt == DType::f64, "chunked_lm_loss kernel got ", dt);
  TIDAL_ASSERT(hidden.is_contiguous() && weight.is_contiguous() && targets.is_contiguous() && logits.is_contiguous() &&
                   row_loss.is_contiguous(),
               "chunked_lm_loss needs contiguous operands");
  const int64_t N = a.rows, V = a.vocab;
  const bool grad = grad_hidden.defined() || grad_weight.defined();
  const cudaStream_t s = stream_handle(stream);
  const Tensor wt = weight.transpose(0, 1);  // (C, V)
  for (int64_t r0 = 0; r0 < N; r0 += a.chunk) {
    const int64_t n = std::min(a.chunk, N - r0);
    const Tensor hc = hidden.narrow(0, r0, n);  // (n, C)
    const Tensor x = logits.narrow(0, 0, n);    // (n, V)
    matmul(stream, x, hc, wt, 1.0, 0.0);
    launch_loss_rows_inplace(s, device_data(x), dt,
                             static_cast<const char*>(device_data(targets)) + r0 * targets.itemsize(), targets.dtype(),
                             static_cast<char*>(device_data(row_loss)) + r0 * row_loss.itemsize(), n, V, a.ignore_index,
                             a.grad_scale, grad);
    if (grad_hidden.defined()) matmul(stream, grad_hidden.narrow(0, r0, n), x, weight, 1.0, 0.0);
    if (grad_weight.defined()) matmul(stream, grad_weight, x.transpose(0, 1), hc, 1.0, r0 == 0 ? 0.0 : 1.0);
  }
  return sum_rows_in_order(s, device_data(row_loss), dt, N);
}

}  // namespace tidal::cuda

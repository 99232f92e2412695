// The loss family's methods of CudaKernels: checks and arguments, then loss.cu's launchers.
#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/loss_launch.h"
#include "tidal/backend/cuda/scratch.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/tensor.h"

namespace tidal::cuda {

int64_t CudaKernels::find_bad_target(Stream& stream, const Tensor& targets, const CrossEntropyArgs& a) {
  TIDAL_ASSERT(targets.is_contiguous(), "find_bad_target needs contiguous targets");
  if (a.rows == 0) return -1;
  Tensor scratch = scratch_bytes(targets.device(), sizeof(int64_t));
  return launch_find_bad_target(stream_handle(stream), device_data(targets), targets.dtype(), a.rows, a.vocab,
                                a.ignore_index, static_cast<int64_t*>(device_data(scratch)));
}

// The row losses on the device, then their sum in row order on the host (the CPU backend's f64 sum
// over the same per-row values). The per-row values differ from the CPU's by the order of their
// max/exp-sum reductions only (same exp polynomial): ~1e-6 relative in f32, ~1e-15 in f64.
CrossEntropySums CudaKernels::cross_entropy_forward(Stream& stream, const Tensor& loss, const Tensor& lse,
                                                    const Tensor& logits, const Tensor& targets,
                                                    const CrossEntropyArgs& a) {
  TIDAL_ASSERT(targets.is_contiguous() && loss.is_contiguous() && lse.is_contiguous(),
               "cross_entropy_forward needs contiguous targets, loss and lse");
  TIDAL_ASSERT(logits.numel() == 0 || logits.strides()[logits.dim() - 1] == 1, "cross_entropy logits need unit rows");
  CrossEntropySums sums;
  if (a.rows == 0) return sums;
  const cudaStream_t s = stream_handle(stream);
  launch_cross_entropy_forward(s, device_data(loss), device_data(lse), device_data(logits), logits.dtype(),
                               device_data(targets), targets.dtype(), a.rows, a.vocab, a.row_stride, a.ignore_index);
  Tensor scratch = scratch_bytes(targets.device(), sizeof(int64_t));
  sums.count = launch_count_not_ignored(s, device_data(targets), targets.dtype(), a.rows, a.ignore_index,
                                        static_cast<int64_t*>(device_data(scratch)));
  sums.loss = sum_rows_in_order(s, device_data(loss), loss.dtype(), a.rows);
  return sums;
}

void CudaKernels::cross_entropy_backward(Stream& stream, const Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                                         const Tensor& targets, const Tensor& row_grad, double scale,
                                         const CrossEntropyArgs& a) {
  TIDAL_ASSERT(dlogits.is_contiguous() && targets.is_contiguous() && lse.is_contiguous(),
               "cross_entropy_backward needs contiguous dlogits, targets and lse");
  TIDAL_ASSERT(!row_grad.defined() || (row_grad.is_contiguous() && row_grad.dtype() == logits.dtype()),
               "cross_entropy_backward: row_grad must be contiguous in the logits' dtype");
  if (a.rows == 0) return;
  launch_cross_entropy_backward(stream_handle(stream), device_data(dlogits), device_data(logits), logits.dtype(),
                                device_data(lse), device_data(targets), targets.dtype(),
                                row_grad.defined() ? device_data(row_grad) : nullptr, scale, a.rows, a.vocab,
                                a.row_stride, a.ignore_index);
}

}  // namespace tidal::cuda

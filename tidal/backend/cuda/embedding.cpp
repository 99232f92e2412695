// The embedding family's methods of CudaKernels: checks, the backward's scratch (through tidal's
// allocator), then embedding.cu's launchers.
#include "tidal/backend/cuda/embedding_launch.h"
#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/base/error.h"
#include "tidal/tensor.h"

namespace tidal::cuda {

void CudaKernels::embedding_forward(Stream& stream, const Tensor& out, const Tensor& weight, const Tensor& ids) {
  if (out.numel() == 0) return;
  TIDAL_ASSERT(ids.is_contiguous() && out.is_contiguous(), "[cuda] embedding_forward needs contiguous ids and output");
  TIDAL_ASSERT(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, "[cuda] embedding ids must be i32/i64, got ",
               ids.dtype());
  TIDAL_ASSERT(weight.dim() == 2 && out.dtype() == weight.dtype() && out.numel() == ids.numel() * weight.size(1),
               "[cuda] embedding_forward: out ", out.shape(), " for weight ", weight.shape(), " and ids ", ids.shape());
  launch_embedding_forward(stream_handle(stream), weight.dtype(), device_data(out), device_data(weight),
                           weight.stride(0), weight.stride(1), ids.dtype(), device_data(ids), ids.numel(),
                           weight.size(1));
}

void CudaKernels::embedding_backward(Stream& stream, const Tensor& grad_weight, const Tensor& g, const Tensor& ids) {
  if (grad_weight.numel() == 0) return;
  TIDAL_ASSERT(ids.is_contiguous() && g.is_contiguous() && grad_weight.is_contiguous(),
               "[cuda] embedding_backward needs contiguous tensors");
  TIDAL_ASSERT(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, "[cuda] embedding ids must be i32/i64, got ",
               ids.dtype());
  const int64_t V = grad_weight.size(0), C = grad_weight.size(1), n = ids.numel();
  TIDAL_ASSERT(g.dtype() == grad_weight.dtype() && g.numel() == n * C, "[cuda] embedding_backward: g ", g.shape(),
               " for ", n, " ids of ", C, " columns");
  TIDAL_CHECK(n < (int64_t(1) << 31) && V < (int64_t(1) << 31),
              "[cuda] embedding_backward sorts 32-bit ids and positions: ", n, " ids into ", V, " rows is too many");
  const size_t bytes = embedding_backward_scratch_bytes(n, V);
  Tensor scratch = empty({int64_t(bytes)}, DType::u8, grad_weight.device());  // accounted by the op's scope
  launch_embedding_backward(stream_handle(stream), grad_weight.dtype(), device_data(grad_weight),
                            n ? device_data(g) : nullptr, ids.dtype(), n ? device_data(ids) : nullptr, n, V, C,
                            device_data(scratch), bytes);
}

}  // namespace tidal::cuda

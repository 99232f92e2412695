// The RoPE family's methods of CudaKernels. The cos/sin tables are the CPU backend's (its rope_tables
// kernel on host tensors, then copied), so both devices hold the same bits: CUDA's f64 cos/sin differ
// from glibc's in the last bits (and use local memory for large arguments). The rotation runs on the
// device (rope.cu).
#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/rope_launch.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/base/error.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal::cuda {
namespace {

// x/out (B, H, T, D) as they are; a table (T, D) with batch stride 0, or (B, T, D) with its batch in
// sizes[0] (one table per sample: packed documents' positions, ops/rope.h).
RopeView view4(const Tensor& t) {
  RopeView v;
  if (t.dim() == 3) {
    v.sizes[0] = t.size(0), v.strides[0] = t.stride(0);
    v.sizes[2] = t.size(1), v.strides[2] = t.stride(1);
    v.sizes[3] = t.size(2), v.strides[3] = t.stride(2);
    return v;
  }
  const int lead = 4 - t.dim();
  for (int d = 0; d < t.dim(); ++d) {
    v.sizes[lead + d] = t.size(d);
    v.strides[lead + d] = t.stride(d);
  }
  return v;
}

}  // namespace

void CudaKernels::rope_tables(Stream& stream, const Tensor& cos, const Tensor& sin, const RopeTableArgs& a) {
  TIDAL_ASSERT(cos.dim() == 2 && sin.shape() == cos.shape() && cos.is_contiguous() && sin.is_contiguous() &&
                   sin.dtype() == cos.dtype(),
               "[cuda] rope_tables needs contiguous (T, D) cos and sin of one dtype");
  if (cos.numel() == 0) return;
  // The CPU backend's own tables (its kernel, through the seam), then copied over.
  Tensor host_cos = empty(cos.shape(), cos.dtype(), Device::cpu());
  Tensor host_sin = empty(sin.shape(), sin.dtype(), Device::cpu());
  device_kernels(Device::cpu()).rope_tables(current_stream(Device::cpu()), host_cos, host_sin, a);
  copy_from_host(stream, cos, host_cos.raw_data());  // synchronizes: the host tables outlive the copies
  copy_from_host(stream, sin, host_sin.raw_data());
}

void CudaKernels::rope(Stream& stream, const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
                       bool transpose) {
  const bool batched = cos.dim() == 3;
  TIDAL_ASSERT(x.dim() == 4 && out.shape() == x.shape() && (cos.dim() == 2 || (batched && cos.size(0) == x.size(0))) &&
                   sin.shape() == cos.shape() && cos.size(-2) == x.size(2) && cos.size(-1) == x.size(3) &&
                   x.size(3) % 2 == 0,
               "[cuda] rope needs x/out (B, H, T, D) and cos/sin (T, D) or (B, T, D), got ", x.shape(), " ",
               out.shape(), " ", cos.shape(), " ", sin.shape());
  TIDAL_ASSERT(out.dtype() == x.dtype() && cos.dtype() == x.dtype() && sin.dtype() == x.dtype(),
               "[cuda] rope needs one dtype for x, out, cos and sin");
  if (out.numel() == 0) return;
  launch_rope(stream_handle(stream), x.dtype(), device_data(out), view4(out), device_data(x), view4(x),
              device_data(cos), view4(cos), device_data(sin), view4(sin), transpose);
}

}  // namespace tidal::cuda

// The elementwise family's methods of CudaKernels: checks and arguments, then elementwise.cu's launchers.
#include "tidal/backend/cuda/elementwise_launch.h"
#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/tensor.h"

namespace tidal::cuda {

void CudaKernels::fill(Stream& stream, const Tensor& dst, double value) {
  launch_fill(stream_handle(stream), strided(dst), dst.numel(), value);
}

}  // namespace tidal::cuda

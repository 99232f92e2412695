#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/elementwise_launch.h"

namespace tidal::cuda {
namespace {

template <class T>
__global__ void fill_kernel(Strided dst, int64_t n, T value) {
  T* p = static_cast<T*>(dst.data);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[dst.offset(i)] = value;
}

template <class T>
void fill_as(cudaStream_t stream, const Strided& dst, int64_t n, T value) {
  fill_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(dst, n, value);
  TIDAL_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_fill(cudaStream_t stream, const Strided& dst, int64_t n, double value) {
  if (n == 0) return;
  switch (dst.dtype) {
    case DType::f32: return fill_as(stream, dst, n, float(value));
    case DType::bf16: return fill_as(stream, dst, n, __float2bfloat16_rn(float(value)));
    case DType::f64: return fill_as(stream, dst, n, value);
    case DType::i32: return fill_as(stream, dst, n, int32_t(value));
    case DType::i64: return fill_as(stream, dst, n, int64_t(value));
    case DType::u8: return fill_as(stream, dst, n, uint8_t(value));
  }
}

}  // namespace tidal::cuda

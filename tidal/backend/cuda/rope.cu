// Rotary position embedding (Hugging Face Llama layout: the two halves of the head dim rotate against
// each other). One thread per (row, i < D/2) pair of elements, any strides.
#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/rope_launch.h"

namespace tidal::cuda {
namespace {

// Forward: lo' = lo*c_lo - hi*s_lo, hi' = hi*c_hi + lo*s_hi. Transpose: lo' = lo*c_lo + hi*s_hi,
// hi' = hi*c_hi - lo*s_lo (the CPU's RopeRow, written with (a_off, sign) and (b_off, -sign)).
template <class T>
__global__ void rope_kernel(T* out, RopeView ov, const T* x, RopeView xv, const T* cos, RopeView cv, const T* sin,
                            RopeView sv, bool transpose) {
  using A = acc_t<T>;
  const int64_t H = ov.sizes[1], Tn = ov.sizes[2], half = ov.sizes[3] / 2;
  const int64_t total = ov.sizes[0] * H * Tn * half;
  const int64_t a_off = transpose ? half : 0, b_off = transpose ? 0 : half;
  const A sign = transpose ? A(1) : A(-1);
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k % half, r = k / half;
    const int64_t t = r % Tn, h = (r / Tn) % H, b = r / (Tn * H);
    const T* xr = x + b * xv.strides[0] + h * xv.strides[1] + t * xv.strides[2];
    T* orow = out + b * ov.strides[0] + h * ov.strides[1] + t * ov.strides[2];
    const T* cr = cos + b * cv.strides[0] + t * cv.strides[2];  // a (T, D) table has batch stride 0
    const T* sr = sin + b * sv.strides[0] + t * sv.strides[2];
    const int64_t sx = xv.strides[3], so = ov.strides[3], sc = cv.strides[3], ss = sv.strides[3];
    const A lo = to_acc(xr[i * sx]), hi = to_acc(xr[(i + half) * sx]);
    const A out_lo = lo * to_acc(cr[i * sc]) + sign * hi * to_acc(sr[(i + a_off) * ss]);
    const A out_hi = hi * to_acc(cr[(i + half) * sc]) - sign * lo * to_acc(sr[(i + b_off) * ss]);
    orow[i * so] = from_acc<T>(out_lo);
    orow[(i + half) * so] = from_acc<T>(out_hi);
  }
}

}  // namespace

void launch_rope(cudaStream_t stream, DType dtype, void* out, const RopeView& out_view, const void* x,
                 const RopeView& x_view, const void* cos, const RopeView& cos_view, const void* sin,
                 const RopeView& sin_view, bool transpose) {
  const int64_t work = out_view.sizes[0] * out_view.sizes[1] * out_view.sizes[2] * (out_view.sizes[3] / 2);
  if (work == 0) return;
  TIDAL_CUDA_FLOATING(dtype, "apply_rope", T, {
    rope_kernel<T><<<grid_for(work), kThreads, 0, stream>>>(static_cast<T*>(out), out_view, static_cast<const T*>(x),
                                                            x_view, static_cast<const T*>(cos), cos_view,
                                                            static_cast<const T*>(sin), sin_view, transpose);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tidal::cuda

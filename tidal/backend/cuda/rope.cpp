// The RoPE family's methods of CudaKernels. The cos/sin tables are computed on the host exactly as the
// CPU backend computes them (f64 std::pow / std::cos / std::sin, rounded once to the dtype), so both
// devices hold the same bits; CUDA's f64 cos/sin differ from glibc's in the last bits (and use local
// memory for large arguments). The rotation runs on the device (rope.cu).
#include <algorithm>
#include <cmath>
#include <vector>

#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/rope_launch.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/base/error.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cuda {
namespace {

// The CPU backend's tables_typed (backend/cpu/rope.cpp), into host vectors.
template <typename T>
void host_tables(std::vector<T>& cp, std::vector<T>& sp, int64_t seq, int64_t dim, double theta,
                 int64_t position_offset) {
  const int64_t half = dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv_freq[size_t(i)] = 1.0 / std::pow(theta, double(2 * i) / double(dim));
  cp.resize(size_t(seq * dim));
  sp.resize(size_t(seq * dim));
  parallel_for(0, seq, std::max<int64_t>(1, 4096 / std::max<int64_t>(half, 1)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const double pos = double(position_offset + t);
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * inv_freq[size_t(i)];
        const T c = T(acc_t<T>(std::cos(angle))), s = T(acc_t<T>(std::sin(angle)));
        cp[size_t(t * dim + i)] = cp[size_t(t * dim + half + i)] = c;
        sp[size_t(t * dim + i)] = sp[size_t(t * dim + half + i)] = s;
      }
    }
  });
}

RopeView view4(const Tensor& t) {
  RopeView v;
  const int lead = 4 - t.dim();
  for (int d = 0; d < t.dim(); ++d) {
    v.sizes[lead + d] = t.size(d);
    v.strides[lead + d] = t.stride(d);
  }
  return v;
}

}  // namespace

void CudaKernels::rope_tables(Stream& stream, const Tensor& cos, const Tensor& sin, double theta,
                              int64_t position_offset) {
  TIDAL_ASSERT(cos.dim() == 2 && sin.shape() == cos.shape() && cos.is_contiguous() && sin.is_contiguous() &&
                   sin.dtype() == cos.dtype(),
               "[cuda] rope_tables needs contiguous (T, D) cos and sin of one dtype");
  if (cos.numel() == 0) return;
  dispatch_float(cos.dtype(), "rope_tables", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<T> c, s;
    host_tables(c, s, cos.size(0), cos.size(1), theta, position_offset);
    copy_from_host(stream, cos, c.data());  // synchronizes: the vectors outlive the copies
    copy_from_host(stream, sin, s.data());
  });
}

void CudaKernels::rope(Stream& stream, const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
                       bool transpose) {
  TIDAL_ASSERT(x.dim() == 4 && out.shape() == x.shape() && cos.dim() == 2 && sin.shape() == cos.shape() &&
                   cos.size(0) == x.size(2) && cos.size(1) == x.size(3) && x.size(3) % 2 == 0,
               "[cuda] rope needs x/out (B, H, T, D) and cos/sin (T, D), got ", x.shape(), " ", out.shape(), " ",
               cos.shape(), " ", sin.shape());
  TIDAL_ASSERT(out.dtype() == x.dtype() && cos.dtype() == x.dtype() && sin.dtype() == x.dtype(),
               "[cuda] rope needs one dtype for x, out, cos and sin");
  if (out.numel() == 0) return;
  launch_rope(stream_handle(stream), x.dtype(), device_data(out), view4(out), device_data(x), view4(x),
              device_data(cos), view4(cos), device_data(sin), view4(sin), transpose);
}

}  // namespace tidal::cuda

// The optimizer family's methods of CudaKernels: checks and arguments, then optim.cu's launchers.
#include <cmath>

#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/optim_launch.h"
#include "tidal/backend/cuda/scratch.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/tensor.h"

namespace tidal::cuda {

// The CPU backend's chunks and order of additions within each: the partials equal the CPU's to the
// rounding of fused multiply-adds (both contract x*x + acc where the CPU's target has FMA).
void CudaKernels::sum_of_squares(Stream& stream, const Tensor& x, int64_t chunk, double* partials) {
  TIDAL_ASSERT(chunk > 0);
  TIDAL_ASSERT(x.is_contiguous(), "sum_of_squares needs a contiguous tensor");
  const int64_t n = x.numel(), chunks = (n + chunk - 1) / chunk;
  if (chunks == 0) return;
  Tensor device_partials = scratch_bytes(x.device(), chunks * int64_t(sizeof(double)));
  launch_sum_of_squares(stream_handle(stream), device_data(x), x.dtype(), n, chunk,
                        static_cast<double*>(device_data(device_partials)), partials);
}

// torch.optim.AdamW's scalars, computed in double as the CPU backend does (optim.cpp adamw_typed).
void CudaKernels::adamw_step(Stream& stream, const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                             const Tensor& exp_avg_sq, const Tensor& master, const AdamWArgs& a) {
  const DType dt = param.dtype();
  const DType state = dt == DType::f64 ? DType::f64 : DType::f32;
  TIDAL_ASSERT(param.is_contiguous() && grad.is_contiguous() && exp_avg.is_contiguous() && exp_avg_sq.is_contiguous(),
               "adamw needs contiguous tensors");
  TIDAL_ASSERT(grad.dtype() == dt && exp_avg.dtype() == state && exp_avg_sq.dtype() == state, "adamw dtypes: param ",
               dt, ", grad ", grad.dtype(), ", state ", exp_avg.dtype(), "/", exp_avg_sq.dtype());
  const bool needs_master = dt == DType::bf16;
  TIDAL_ASSERT(master.defined() == needs_master, "adamw: a master copy goes with a bf16 param (and only then)");
  TIDAL_ASSERT(
      !needs_master || (master.is_contiguous() && master.dtype() == DType::f32 && master.numel() == param.numel()),
      "adamw: the master copy must be contiguous f32 of the param's size");
  AdamWScalars s;
  s.decay = 1.0 - a.lr * a.weight_decay;
  s.beta1 = a.beta1;
  s.one_minus_beta1 = 1.0 - a.beta1;
  s.beta2 = a.beta2;
  s.one_minus_beta2 = 1.0 - a.beta2;
  const double bc1 = 1.0 - std::pow(a.beta1, double(a.step));
  const double bc2 = 1.0 - std::pow(a.beta2, double(a.step));
  s.step_size = a.lr / bc1;
  s.bc2_sqrt = std::sqrt(bc2);
  s.eps = a.eps;
  launch_adamw(stream_handle(stream), dt, device_data(param), device_data(grad), device_data(exp_avg),
               device_data(exp_avg_sq), needs_master ? device_data(master) : nullptr, param.numel(), s);
}

}  // namespace tidal::cuda

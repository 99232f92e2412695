// The optimizer family's methods of CudaKernels: checks and arguments, then optim.cu's launchers.
#include <algorithm>
#include <climits>
#include <cmath>
#include <span>
#include <vector>

#include "tidal/backend/cuda/check.h"
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
  const Tensor* one = &x;
  sum_of_squares_many(stream, std::span<const Tensor* const>(&one, 1), chunk, std::span<double* const>(&partials, 1));
}

void CudaKernels::sum_of_squares_many(Stream& stream, std::span<const Tensor* const> xs, int64_t chunk,
                                      std::span<double* const> partials) {
  TIDAL_ASSERT(chunk > 0 && xs.size() == partials.size());
  if (xs.empty()) return;
  std::vector<int64_t> first(xs.size() + 1, 0);  // tensor i's partials start at first[i]
  for (size_t i = 0; i < xs.size(); ++i) {
    TIDAL_ASSERT(xs[i]->is_contiguous() && xs[i]->device() == xs[0]->device(),
                 "sum_of_squares_many needs contiguous tensors on one device");
    first[i + 1] = first[i] + (xs[i]->numel() + chunk - 1) / chunk;
  }
  if (first.back() == 0) return;
  Tensor device_partials = scratch_bytes(xs[0]->device(), first.back() * int64_t(sizeof(double)));
  auto* all = static_cast<double*>(device_data(device_partials));
  const cudaStream_t s = stream_handle(stream);
  for (size_t i = 0; i < xs.size(); ++i)
    launch_sum_of_squares(s, device_data(*xs[i]), xs[i]->dtype(), xs[i]->numel(), chunk, all + first[i]);
  std::vector<double> host(size_t(first.back()));
  TIDAL_CUDA_CHECK(cudaMemcpyAsync(host.data(), all, host.size() * sizeof(double), cudaMemcpyDeviceToHost, s));
  TIDAL_CUDA_CHECK(cudaStreamSynchronize(s));
  for (size_t i = 0; i < xs.size(); ++i) std::copy(host.begin() + first[i], host.begin() + first[i + 1], partials[i]);
}

void CudaKernels::add_rows_inplace(Stream& stream, const Tensor& dst, std::span<const Tensor* const> rows) {
  TIDAL_ASSERT(dst.is_contiguous(), "add_rows_inplace: a non-contiguous dst");
  std::vector<const void*> ptrs;
  for (const Tensor* r : rows) {
    TIDAL_ASSERT(
        r->is_contiguous() && r->numel() == dst.numel() && r->dtype() == dst.dtype() && r->device() == dst.device(),
        "add_rows_inplace: a row unlike dst");
    ptrs.push_back(device_data(*r));
  }
  if (ptrs.empty()) return;
  launch_add_rows(stream_handle(stream), dst.dtype(), device_data(dst), ptrs, dst.numel());
}

namespace {

// torch.optim.AdamW's scalars, computed in double as the CPU backend does (optim.cpp adamw_typed).
AdamWScalars adamw_scalars(const AdamWArgs& a) {
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
  return s;
}

// adamw_step's operands as its kernel reads them: contiguous, grad in the param's dtype, the states in
// its accumulate type, a master copy with (and only with) a bf16 param.
void check_adamw(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& master) {
  const DType dt = param.dtype();
  const DType state = dt == DType::f64 ? DType::f64 : DType::f32;
  TIDAL_ASSERT(param.is_contiguous() && grad.is_contiguous() && exp_avg.is_contiguous() && exp_avg_sq.is_contiguous(),
               "adamw needs contiguous tensors");
  TIDAL_ASSERT(grad.dtype() == dt && exp_avg.dtype() == state && exp_avg_sq.dtype() == state, "adamw dtypes: param ",
               dt, ", grad ", grad.dtype(), ", state ", exp_avg.dtype(), "/", exp_avg_sq.dtype());
  TIDAL_ASSERT(grad.numel() == param.numel() && exp_avg.numel() == param.numel() && exp_avg_sq.numel() == param.numel(),
               "adamw: param ", param.shape(), ", grad ", grad.shape(), ", states ", exp_avg.shape(), "/",
               exp_avg_sq.shape(), " differ in size");
  const bool needs_master = dt == DType::bf16;
  TIDAL_ASSERT(master.defined() == needs_master, "adamw: a master copy goes with a bf16 param (and only then)");
  TIDAL_ASSERT(
      !needs_master || (master.is_contiguous() && master.dtype() == DType::f32 && master.numel() == param.numel()),
      "adamw: the master copy must be contiguous f32 of the param's size");
}

}  // namespace

void CudaKernels::adamw_step(Stream& stream, const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                             const Tensor& exp_avg_sq, const Tensor& master, const AdamWArgs& a) {
  check_adamw(param, grad, exp_avg, exp_avg_sq, master);
  const bool needs_master = param.dtype() == DType::bf16;
  launch_adamw(stream_handle(stream), param.dtype(), device_data(param), device_data(grad), device_data(exp_avg),
               device_data(exp_avg_sq), needs_master ? device_data(master) : nullptr, param.numel(), adamw_scalars(a));
}

// Every tensor of the step sorted by form, then each form's tensors a few dozen per launch
// (launch_adamw_multi): the bits of adamw_step (and of the copy, for a bf16 copy) tensor by tensor.
void CudaKernels::adamw_multi_step(Stream& stream, std::span<const AdamWTensors> tensors) {
  std::vector<AdamWTensorJob> jobs[kAdamWForms];
  for (const AdamWTensors& t : tensors) {
    const Tensor& param = *t.param;
    check_adamw(param, *t.grad, *t.exp_avg, *t.exp_avg_sq, *t.master);
    TIDAL_ASSERT(param.device() == tensors.front().param->device(), "adamw_multi_step: tensors on ", param.device(),
                 " and ", tensors.front().param->device());
    TIDAL_ASSERT((param.numel() + kAdamWChunk - 1) / kAdamWChunk <= INT32_MAX, "adamw_multi_step: ", param.numel(),
                 " elements are more chunks than a table indexes");
    AdamWTensorJob j;
    j.grad = device_data(*t.grad);
    j.exp_avg = device_data(*t.exp_avg);
    j.exp_avg_sq = device_data(*t.exp_avg_sq);
    j.n = param.numel();
    j.s = adamw_scalars(t.args);
    AdamWForm form = AdamWForm::f32;
    if (t.bf16_param != nullptr) {
      const Tensor& out = *t.bf16_param;
      TIDAL_ASSERT(param.dtype() == DType::f32 && out.dtype() == DType::bf16 && out.is_contiguous() &&
                       out.numel() == param.numel() && out.device() == param.device(),
                   "adamw_multi_step: a bf16 copy ", out.dtype(), " ", out.shape(), " of an ", param.dtype(), " ",
                   param.shape(), " master");
      form = AdamWForm::bf16_f32_grad;
      j.param = device_data(out);
      j.master = device_data(param);
    } else {
      form = param.dtype() == DType::f64    ? AdamWForm::f64
             : param.dtype() == DType::bf16 ? AdamWForm::bf16
                                            : AdamWForm::f32;
      j.param = device_data(param);
      j.master = form == AdamWForm::bf16 ? device_data(*t.master) : nullptr;
    }
    jobs[int(form)].push_back(j);
  }
  const cudaStream_t s = stream_handle(stream);
  for (int f = 0; f < kAdamWForms; ++f)
    if (!jobs[f].empty()) launch_adamw_multi(s, AdamWForm(f), jobs[f]);
}

}  // namespace tidal::cuda

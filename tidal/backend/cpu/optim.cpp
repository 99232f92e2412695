// CPU kernels of the optimizer family: the fused AdamW update and the f64 sum of squares that
// gradient clipping measures. Contiguous tensors only (parameters and gradients are).
#include "tidal/backend/cpu/kernels.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "tidal/backend/cpu/vec_math.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

constexpr int64_t kGrain = 1 << 15;  // elements per thread at least: the update is memory-bound

template <typename P>
void adamw_typed(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& master, const AdamWArgs& a) {
  using S = acc_t<P>;
  constexpr bool kMaster = std::is_same_v<P, BFloat16>;
  const int64_t n = param.numel();
  P* p = param.data<P>();
  const P* g = grad.data<P>();
  S* m = exp_avg.data<S>();
  S* v = exp_avg_sq.data<S>();
  S* w = kMaster ? master.data<S>() : nullptr;
  // torch.optim.AdamW's scalars: Python doubles, rounded to the tensor's type when applied.
  const S decay = S(1.0 - a.lr * a.weight_decay);
  const S b1 = S(a.beta1), c1 = S(1.0 - a.beta1), b2 = S(a.beta2), c2 = S(1.0 - a.beta2);
  const double bc1 = 1.0 - std::pow(a.beta1, double(a.step));
  const double bc2 = 1.0 - std::pow(a.beta2, double(a.step));
  const S step_size = S(a.lr / bc1), bc2_sqrt = S(std::sqrt(bc2)), eps = S(a.eps);
  parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    // Locals, not captured members, so GCC vectorizes (Note [Vectorizable math]).
    P* pp = p;
    const P* gp = g;
    S* mp = m;
    S* vp = v;
    S* wp = w;
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const S gi = S(gp[i]);
      S x;
      if constexpr (kMaster) {
        x = wp[i];
      } else {
        x = pp[i];
      }
      x = x * decay;                                   // param.mul_(1 - lr * wd)
      const S mi = mp[i] * b1 + c1 * gi;               // exp_avg.mul_(b1).add_(g, alpha=1-b1)
      const S vi = vp[i] * b2 + c2 * gi * gi;          // exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
      const S denom = std::sqrt(vi) / bc2_sqrt + eps;  // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
      x = x - step_size * mi / denom;                  // param.addcdiv_(exp_avg, denom, value=-step_size)
      mp[i] = mi;
      vp[i] = vi;
      if constexpr (kMaster) {
        wp[i] = x;
        pp[i] = store_as<P>(x);
      } else {
        pp[i] = x;
      }
    }
  });
}

// 32 independent f64 accumulators (four 8-wide vectors): enough to hide the FMA latency.
template <typename T>
double chunk_sum_of_squares(const T* x, int64_t n) {
  constexpr int kAcc = 32;
  double acc[kAcc] = {};
  int64_t i = 0;
  for (; i + kAcc <= n; i += kAcc)
    for (int k = 0; k < kAcc; ++k) {
      const double v = double(acc_t<T>(x[i + k]));
      acc[k] += v * v;
    }
  for (; i < n; ++i) {
    const double v = double(acc_t<T>(x[i]));
    acc[i % kAcc] += v * v;
  }
  for (int width = kAcc / 2; width >= 1; width /= 2)
    for (int k = 0; k < width; ++k) acc[k] += acc[k + width];
  return acc[0];
}

}  // namespace

// One AdamW update in a single pass, torch.optim.AdamW's arithmetic (see tidal/optim/adamw.h).
// param and grad (n) share the param dtype; exp_avg and exp_avg_sq (n) are acc_t of it; master (n, f32)
// is the master weight of a bf16 param (undefined otherwise): it is updated and param := bf16(master).
void CpuKernels::adamw_step(Stream&, const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, const Tensor& master, const AdamWArgs& a) {
  dispatch_float(param.dtype(), "adamw", [&](auto tag) {
    using P = typename decltype(tag)::type;
    adamw_typed<P>(param, grad, exp_avg, exp_avg_sq, master, a);
  });
}

// sum(x^2) accumulated in f64 over fixed chunks added in order: the same bits for any thread count.
void CpuKernels::sum_of_squares(Stream&, const Tensor& x, int64_t chunk, double* partials) {
  TIDAL_ASSERT(chunk > 0);
  dispatch_float(x.dtype(), "sum_of_squares", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = x.data<T>();
    const int64_t n = x.numel(), chunks = (n + chunk - 1) / chunk;
    parallel_for(0, chunks, 4, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) partials[c] = chunk_sum_of_squares(p + c * chunk, std::min(chunk, n - c * chunk));
    });
  });
}

}  // namespace tidal::cpu

// CPU kernels of the optimizer family: the fused AdamW update and the f64 sum of squares that
// gradient clipping measures. Contiguous tensors only (parameters and gradients are).
#include "tidal/backend/cpu/kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <type_traits>
#include <vector>

#include "tidal/backend/cpu/vec_math.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

constexpr int64_t kGrain = 1 << 15;  // elements per thread at least: the update is memory-bound

// Blocks of at most kGrain elements of every tensor of `numels`, in order: {tensor, begin, end}. The many-tensor
// kernels run all of them in one parallel loop (an MoE model's hundreds of small experts each took a parallel
// region of their own).
std::vector<std::array<int64_t, 3>> blocks_of(const std::vector<int64_t>& numels) {
  std::vector<std::array<int64_t, 3>> blocks;
  for (size_t t = 0; t < numels.size(); ++t)
    for (int64_t b = 0; b < numels[t]; b += kGrain) blocks.push_back({int64_t(t), b, std::min(numels[t], b + kGrain)});
  return blocks;
}

// One tensor's AdamW update (torch.optim.AdamW's arithmetic, see tidal/optim/adamw.h) over any range of its
// elements; `copy`, when set, gets the updated f32 param rounded to bf16 in the same pass (--bf16's weights
// written from their f32 masters: what Kernels::copy writes).
template <typename P>
struct AdamWPass {
  using S = acc_t<P>;
  static constexpr bool kMaster = std::is_same_v<P, BFloat16>;
  P* p;
  const P* g;
  S* m;
  S* v;
  S* w;
  BFloat16* copy;
  S decay, b1, c1, b2, c2, step_size, bc2_sqrt, eps;

  AdamWPass(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
            const Tensor& master, const AdamWArgs& a, const Tensor* bf16_copy)
      : p(param.data<P>()),
        g(grad.data<P>()),
        m(exp_avg.data<S>()),
        v(exp_avg_sq.data<S>()),
        w(kMaster ? master.data<S>() : nullptr),
        copy(bf16_copy != nullptr ? bf16_copy->data<BFloat16>() : nullptr) {
    // torch.optim.AdamW's scalars: Python doubles, rounded to the tensor's type when applied.
    decay = S(1.0 - a.lr * a.weight_decay);
    b1 = S(a.beta1), c1 = S(1.0 - a.beta1), b2 = S(a.beta2), c2 = S(1.0 - a.beta2);
    const double bc1 = 1.0 - std::pow(a.beta1, double(a.step));
    const double bc2 = 1.0 - std::pow(a.beta2, double(a.step));
    step_size = S(a.lr / bc1), bc2_sqrt = S(std::sqrt(bc2)), eps = S(a.eps);
  }

  void run(int64_t begin, int64_t end) const {
    if (copy != nullptr)
      loop<true>(begin, end);
    else
      loop<false>(begin, end);
  }

  template <bool kCopy>
  void loop(int64_t begin, int64_t end) const {
    // Locals, not members, so GCC vectorizes (Note [Vectorizable math]).
    P* pp = p;
    const P* gp = g;
    S* mp = m;
    S* vp = v;
    S* wp = w;
    BFloat16* cp = copy;
    const S dec = decay, beta1 = b1, one1 = c1, beta2 = b2, one2 = c2, step = step_size, bc2s = bc2_sqrt, e = eps;
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const S gi = S(gp[i]);
      S x;
      if constexpr (kMaster) {
        x = wp[i];
      } else {
        x = pp[i];
      }
      x = x * dec;                                  // param.mul_(1 - lr * wd)
      const S mi = mp[i] * beta1 + one1 * gi;       // exp_avg.mul_(b1).add_(g, alpha=1-b1)
      const S vi = vp[i] * beta2 + one2 * gi * gi;  // exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
      const S denom = std::sqrt(vi) / bc2s + e;     // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
      x = x - step * mi / denom;                    // param.addcdiv_(exp_avg, denom, value=-step_size)
      mp[i] = mi;
      vp[i] = vi;
      if constexpr (kMaster) {
        wp[i] = x;
        pp[i] = store_as<P>(x);
      } else {
        pp[i] = x;
      }
      if constexpr (kCopy) cp[i] = store_as<BFloat16>(x);
    }
  }
};

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
    const AdamWPass<P> pass(param, grad, exp_avg, exp_avg_sq, master, a, nullptr);
    parallel_for(0, param.numel(), kGrain, [&](int64_t b, int64_t e) { pass.run(b, e); });
  });
}

// Every tensor's update in one parallel loop over blocks of all of them (blocks_of), a bf16 copy written in its
// tensor's pass: the same bits as the default (each element's arithmetic is adamw_step's; the copy rounds as
// Kernels::copy does).
void CpuKernels::adamw_multi_step(Stream&, std::span<const AdamWTensors> tensors) {
  std::vector<std::function<void(int64_t, int64_t)>> passes;
  std::vector<int64_t> numels;
  for (const AdamWTensors& t : tensors) {
    TIDAL_ASSERT(t.bf16_param == nullptr || (t.param->dtype() == DType::f32 && t.bf16_param->dtype() == DType::bf16),
                 "adamw_multi_step: a bf16 copy of a ", t.param->dtype(), " param");
    dispatch_float(t.param->dtype(), "adamw", [&](auto tag) {
      using P = typename decltype(tag)::type;
      passes.push_back([pass = AdamWPass<P>(*t.param, *t.grad, *t.exp_avg, *t.exp_avg_sq, *t.master, t.args,
                                            t.bf16_param)](int64_t b, int64_t e) { pass.run(b, e); });
    });
    numels.push_back(t.param->numel());
  }
  const std::vector<std::array<int64_t, 3>> blocks = blocks_of(numels);
  parallel_for(0, int64_t(blocks.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) passes[size_t(blocks[size_t(i)][0])](blocks[size_t(i)][1], blocks[size_t(i)][2]);
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

// Every chunk of every tensor in one parallel loop (the default runs a parallel region per tensor); each
// chunk's partial as sum_of_squares computes it.
void CpuKernels::sum_of_squares_many(Stream&, std::span<const Tensor* const> xs, int64_t chunk,
                                     std::span<double* const> partials) {
  TIDAL_ASSERT(chunk > 0 && xs.size() == partials.size());
  std::vector<std::array<int64_t, 2>> work;  // {tensor, chunk}
  for (size_t t = 0; t < xs.size(); ++t)
    for (int64_t c = 0; c * chunk < xs[t]->numel(); ++c) work.push_back({int64_t(t), c});
  parallel_for(0, int64_t(work.size()), 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Tensor& x = *xs[size_t(work[size_t(i)][0])];
      const int64_t c = work[size_t(i)][1], n = std::min(chunk, x.numel() - c * chunk);
      dispatch_float(x.dtype(), "sum_of_squares", [&](auto tag) {
        using T = typename decltype(tag)::type;
        partials[size_t(work[size_t(i)][0])][c] = chunk_sum_of_squares(x.data<T>() + c * chunk, n);
      });
    }
  });
}

// Every tensor's blocks (blocks_of) in one parallel loop, each element as unary mul_scalar computes it (in acc_t,
// the scalar rounded to it). Contiguous tensors (gradients are).
void CpuKernels::scale_many(Stream&, std::span<const Tensor* const> xs, double value) {
  std::vector<int64_t> numels;
  for (const Tensor* x : xs) {
    TIDAL_ASSERT(x->is_contiguous(), "scale_many: a non-contiguous tensor");
    numels.push_back(x->numel());
  }
  const std::vector<std::array<int64_t, 3>> blocks = blocks_of(numels);
  parallel_for(0, int64_t(blocks.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Tensor& x = *xs[size_t(blocks[size_t(i)][0])];
      dispatch_float(x.dtype(), "scale_many", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = acc_t<T>;
        const A s = A(value);
        T* p = x.data<T>();
#pragma omp simd
        for (int64_t j = blocks[size_t(i)][1]; j < blocks[size_t(i)][2]; ++j) p[j] = store_as<T>(A(acc_t<T>(p[j]) * s));
      });
    }
  });
}

// Column blocks in parallel, each element through the rows in order, rounded to T after each add as add_inplace
// (binary add in acc_t) rounds it: the same bits as one add_inplace per row.
void CpuKernels::add_rows_inplace(Stream&, const Tensor& dst, std::span<const Tensor* const> rows) {
  TIDAL_ASSERT(dst.is_contiguous(), "add_rows_inplace: a non-contiguous dst");
  for (const Tensor* row : rows)
    TIDAL_ASSERT(row->is_contiguous() && row->numel() == dst.numel() && row->dtype() == dst.dtype(),
                 "add_rows_inplace: a row unlike dst");
  const int64_t n = dst.numel();
  dispatch_float(dst.dtype(), "add_rows_inplace", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    T* out = dst.data<T>();
    parallel_for(0, n, 1 << 14, [&](int64_t b, int64_t e) {
      for (const Tensor* r : rows) {
        const T* row = r->data<T>();
#pragma omp simd
        for (int64_t j = b; j < e; ++j) out[j] = store_as<T>(A(A(out[j]) + A(row[j])));
      }
    });
  });
}

}  // namespace tidal::cpu

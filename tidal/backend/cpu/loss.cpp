// CPU kernels of the fused cross-entropy: logits are read in place (rows with a unit inner stride and
// one row stride), nothing of the logits' size is allocated in forward, and backward writes the
// gradient in a single pass.
#include "tidal/backend/cpu/kernels.h"

#include <cmath>

#include "tidal/backend/cpu/softmax.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

int64_t row_grain(int64_t vocab) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(vocab, 1)); }

// Calls f(Tag<T>{}, Tag<I>{}) for the logits' float type and the targets' index type.
template <typename F>
void dispatch_logits_targets(DType logits, DType targets, F&& f) {
  dispatch_float(logits, "cross_entropy",
                 [&](auto tt) { dispatch_index(targets, "cross_entropy", [&](auto it) { f(tt, it); }); });
}

template <typename T, typename I>
CrossEntropySums forward_typed(const Tensor& loss, const Tensor& lse, const Tensor& logits, const Tensor& targets,
                               const CrossEntropyArgs& a) {
  using A = acc_t<T>;
  const T* x = logits.data<T>();
  const I* t = targets.data<I>();
  A* lp = loss.data<A>();
  A* sp = lse.data<A>();
  parallel_for(0, a.rows, row_grain(a.vocab), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t target = int64_t(t[r]);
      if (target == a.ignore_index) {
        lp[r] = sp[r] = A(0);
        continue;
      }
      const T* xr = x + r * a.row_stride;
      const A l = row_logsumexp(xr, a.vocab);
      sp[r] = l;
      lp[r] = l - A(xr[target]);
    }
  });
  CrossEntropySums sums;
  for (int64_t r = 0; r < a.rows; ++r) {  // fixed order: independent of the thread count
    if (int64_t(t[r]) == a.ignore_index) continue;
    sums.loss += double(lp[r]);
    ++sums.count;
  }
  return sums;
}

template <typename T, typename I>
void backward_typed(const Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                    const Tensor& row_grad, double scale, const CrossEntropyArgs& a) {
  using A = acc_t<T>;
  const int64_t V = a.vocab;
  const T* x = logits.data<T>();
  const I* t = targets.data<I>();
  const A* sp = lse.data<A>();
  const T* rg = row_grad.defined() ? row_grad.data<T>() : nullptr;
  T* d = dlogits.data<T>();
  parallel_for(0, a.rows, row_grain(V), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t target = int64_t(t[r]);
      T* dr = d + r * V;
      if (target == a.ignore_index) {
#pragma omp simd
        for (int64_t j = 0; j < V; ++j) dr[j] = store_as<T>(A(0));
        continue;
      }
      const T* xr = x + r * a.row_stride;
      const A l = sp[r], s = A(rg ? scale * double(A(rg[r])) : scale);
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) dr[j] = store_as<T>(fast_exp(A(xr[j]) - l) * s);
      dr[target] = store_as<T>((fast_exp(A(xr[target]) - l) - A(1)) * s);
    }
  });
}

}  // namespace

// Position of the first target outside [0, vocab) that is not ignore_index, or -1. targets:
// contiguous (rows) i32 or i64.
int64_t CpuKernels::find_bad_target(Stream&, const Tensor& targets, const CrossEntropyArgs& a) {
  int64_t bad = -1;
  dispatch_index(targets.dtype(), "cross_entropy", [&](auto it) {
    using I = typename decltype(it)::type;
    const I* t = targets.data<I>();
    for (int64_t r = 0; r < a.rows && bad < 0; ++r) {
      const int64_t v = int64_t(t[r]);
      if (v != a.ignore_index && (v < 0 || v >= a.vocab)) bad = r;
    }
  });
  return bad;
}

// Per row r: lse[r] = log(sum(exp(logits[r]))), loss[r] = lse[r] - logits[r, target[r]]; both 0 for
// ignored rows. lse and loss (rows) are in the accumulate dtype. Targets must be valid.
CrossEntropySums CpuKernels::cross_entropy_forward(Stream&, const Tensor& loss, const Tensor& lse, const Tensor& logits,
                                                   const Tensor& targets, const CrossEntropyArgs& a) {
  CrossEntropySums sums;
  dispatch_logits_targets(logits.dtype(), targets.dtype(), [&](auto tt, auto it) {
    sums = forward_typed<typename decltype(tt)::type, typename decltype(it)::type>(loss, lse, logits, targets, a);
  });
  return sums;
}

// dlogits (rows, vocab) contiguous = (softmax(logits) - onehot(target)) * s_r, with s_r = scale *
// row_grad[r] when row_grad (rows, logits dtype) is defined, else scale. Ignored rows get zeros.
void CpuKernels::cross_entropy_backward(Stream&, const Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                                        const Tensor& targets, const Tensor& row_grad, double scale,
                                        const CrossEntropyArgs& a) {
  dispatch_logits_targets(logits.dtype(), targets.dtype(), [&](auto tt, auto it) {
    backward_typed<typename decltype(tt)::type, typename decltype(it)::type>(dlogits, logits, lse, targets, row_grad,
                                                                             scale, a);
  });
}

}  // namespace tidal::cpu

// CPU kernels of the eager attention path: the fused scale + causal (sliding-window, document) mask +
// softmax over the scores the eager path materializes (Megatron's FusedScaleMaskSoftmax). Both
// attention kernels take their exp from vec_math.h, so eager and flash round alike.
#include <algorithm>
#include <limits>
#include <vector>

#include "tidal/backend/cpu/kernels.h"
#include "tidal/backend/cpu/vec_math.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/seam/kernel_args.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

template <typename T>
void softmax_forward_typed(const Tensor& probs, const Tensor& scores, const MaskedSoftmaxArgs& a) {
  using A = acc_t<T>;
  const int64_t t_len = scores.size(-2), s_len = scores.size(-1), rows = scores.numel() / std::max<int64_t>(s_len, 1);
  const int64_t rows_per_sample = std::max<int64_t>(1, rows / std::max<int64_t>(a.batch, 1));
  const A scale = A(a.scale);
  const T* xp = scores.data<T>();
  T* pp = probs.data<T>();
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(s_len, 1)), [&](int64_t r0, int64_t r1) {
    std::vector<A> buf(static_cast<size_t>(s_len));  // the row in the accumulate type
    for (int64_t r = r0; r < r1; ++r) {
      const T* x = xp + r * s_len;
      T* p = pp + r * s_len;
      // The visible keys [j0, j0 + n): the window's (or the document's) first key on, up to the diagonal.
      const KeyRange keys =
          visible_key_range(a.causal, a.window, 0, a.documents, r / rows_per_sample, r % t_len, t_len, s_len);
      const int64_t j0 = keys.first, n = keys.end - keys.first;
      const T* xv = x + j0;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) buf[size_t(j)] = A(xv[j]) * scale;
      const A mx = row_max(buf.data(), n, -std::numeric_limits<A>::infinity());
      const A sum = exp_row(buf.data(), n, mx);
      const A inv = n > 0 ? A(1) / sum : A(0);
      std::fill(p, p + j0, T(A(0)));
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) p[j0 + j] = store_as<T>(buf[size_t(j)] * inv);
      std::fill(p + j0 + n, p + s_len, T(A(0)));
    }
  });
}

template <typename T>
void softmax_backward_typed(const Tensor& gx, const Tensor& gp, const Tensor& probs, double scale_d) {
  using A = acc_t<T>;
  const int64_t s_len = probs.size(-1), rows = probs.numel() / std::max<int64_t>(s_len, 1);
  const A scale = A(scale_d);
  const T* g = gp.data<T>();
  const T* p = probs.data<T>();
  T* o = gx.data<T>();
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(s_len, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* gr = g + r * s_len;
      const T* pr = p + r * s_len;
      T* orow = o + r * s_len;
      A dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < s_len; ++j) dot += A(gr[j]) * A(pr[j]);
#pragma omp simd
      for (int64_t j = 0; j < s_len; ++j) orow[j] = store_as<T>(scale * A(pr[j]) * (A(gr[j]) - dot));
    }
  });
}

}  // namespace

// probs = softmax(scale * scores) per row with the causal mask (and window, and documents); both
// contiguous (..., T, S).
void CpuKernels::scaled_masked_softmax_forward(Stream&, const Tensor& probs, const Tensor& scores,
                                               const MaskedSoftmaxArgs& a) {
  dispatch_float(scores.dtype(), "scaled_masked_softmax",
                 [&](auto tag) { softmax_forward_typed<typename decltype(tag)::type>(probs, scores, a); });
}

// grad_scores = scale * probs * (grad_probs - rowsum(grad_probs * probs)); all contiguous (..., T, S).
void CpuKernels::scaled_masked_softmax_backward(Stream&, const Tensor& grad_scores, const Tensor& grad_probs,
                                                const Tensor& probs, double scale) {
  dispatch_float(probs.dtype(), "scaled_masked_softmax", [&](auto tag) {
    softmax_backward_typed<typename decltype(tag)::type>(grad_scores, grad_probs, probs, scale);
  });
}

}  // namespace tidal::cpu

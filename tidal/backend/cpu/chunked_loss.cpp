// CPU kernel of the chunked LM loss (tidal/ops/chunked_loss.h). Per chunk of rows: the LM-head
// product into one (chunk, V) buffer, each row's cross-entropy, the logits' gradient written over
// the logits in place, then the two products that turn it into the gradients of the chunk's hidden
// rows and (accumulated) of the weight. f32 and f64; the op converts bf16 around it.
#include "tidal/backend/cpu/kernels.h"

#include <cmath>

#include "tidal/backend/cpu/blas.h"
#include "tidal/backend/cpu/softmax.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

int64_t row_grain(int64_t vocab) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(vocab, 1)); }

// Cross-entropy of `rows` rows of x (rows, V) in place: loss[r] = lse - x[target]; with `grad`, the
// row becomes (softmax - onehot) * s, the same expression as cross_entropy's backward (loss.cpp).
template <typename A, typename I>
void rows_forward(A* x, const I* t, A* loss, int64_t rows, int64_t V, int64_t ignore, A s, bool grad) {
  parallel_for(0, rows, row_grain(V), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      A* xr = x + r * V;
      const int64_t target = int64_t(t[r]);
      if (target == ignore) {
        loss[r] = A(0);
        if (grad) {
#pragma omp simd
          for (int64_t j = 0; j < V; ++j) xr[j] = A(0);
        }
        continue;
      }
      const A l = row_logsumexp(xr, V);
      const A xt = xr[target];
      loss[r] = l - xt;
      if (!grad) continue;
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) xr[j] = fast_exp(xr[j] - l) * s;
      xr[target] = (fast_exp(xt - l) - A(1)) * s;
    }
  });
}

template <typename A, typename I>
double forward_typed(const Tensor& hidden, const Tensor& weight, const Tensor& targets, const Tensor& logits,
                     const Tensor& row_loss, const Tensor& grad_hidden, const Tensor& grad_weight,
                     const ChunkedLossArgs& a) {
  const int64_t N = a.rows, C = a.hidden, V = a.vocab;
  const A* h = hidden.data<A>();
  const A* w = weight.data<A>();
  const I* t = targets.data<I>();
  A* x = logits.data<A>();
  A* loss = row_loss.data<A>();
  A* gh = grad_hidden.defined() ? grad_hidden.data<A>() : nullptr;
  A* gw = grad_weight.defined() ? grad_weight.data<A>() : nullptr;
  const bool grad = gh != nullptr || gw != nullptr;
  for (int64_t r0 = 0; r0 < N; r0 += a.chunk) {
    const int64_t n = std::min(a.chunk, N - r0);
    const A* hc = h + r0 * C;
    // The same GEMM calls as linear() and its backward make for these rows (matmul.cpp).
    blas::gemm(false, true, n, V, C, A(1), hc, C, w, C, A(0), x, V);  // logits (n, V) = h W^T
    rows_forward(x, t + r0, loss + r0, n, V, a.ignore_index, A(a.grad_scale), grad);
    if (gh != nullptr) blas::gemm(false, false, n, C, V, A(1), x, V, w, C, A(0), gh + r0 * C, C);  // dlogits W
    if (gw != nullptr)
      blas::gemm(true, false, V, C, n, A(1), x, V, hc, C, A(r0 == 0 ? 0 : 1), gw, C);  // += dlogits^T h
  }
  double sum = 0;
  for (int64_t r = 0; r < N; ++r)  // fixed order: independent of the thread count and of the chunks
    if (int64_t(t[r]) != a.ignore_index) sum += double(loss[r]);
  return sum;
}

}  // namespace

// Rows whose target is not ignore_index. targets: contiguous (rows) i32 or i64.
int64_t CpuKernels::count_not_ignored(Stream&, const Tensor& targets, int64_t ignore_index) {
  int64_t count = 0;
  dispatch_index(targets.dtype(), "chunked_lm_loss", [&](auto it) {
    using I = typename decltype(it)::type;
    const I* t = targets.data<I>();
    for (int64_t r = 0; r < targets.numel(); ++r) count += int64_t(t[r]) != ignore_index;
  });
  return count;
}

// hidden (rows, C), weight (V, C), targets (rows, valid), all contiguous and of one float dtype
// (targets i32/i64); logits (>= min(chunk, rows), V) the working buffer; row_loss (rows). grad_hidden
// (rows, C) and grad_weight (V, C) are written when defined. Returns the sum of the non-ignored row
// losses added in row order: cross_entropy's order, so the mean has the same bits.
double CpuKernels::chunked_lm_loss_forward(Stream&, const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                                           const Tensor& logits, const Tensor& row_loss, const Tensor& grad_hidden,
                                           const Tensor& grad_weight, const ChunkedLossArgs& a) {
  double sum = 0;
  auto run = [&](auto tag) {
    using A = typename decltype(tag)::type;
    dispatch_index(targets.dtype(), "chunked_lm_loss", [&](auto it) {
      sum = forward_typed<A, typename decltype(it)::type>(hidden, weight, targets, logits, row_loss, grad_hidden,
                                                          grad_weight, a);
    });
  };
  switch (hidden.dtype()) {
    case DType::f32: run(Tag<float>{}); break;
    case DType::f64: run(Tag<double>{}); break;
    default: TIDAL_ASSERT(false, "chunked_lm_loss kernel got ", hidden.dtype());
  }
  return sum;
}

}  // namespace tidal::cpu

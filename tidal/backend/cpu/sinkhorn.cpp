// CPU kernels of the Sinkhorn-Knopp projection (ops/sinkhorn.h) over contiguous (matrices, n, n).
// Each matrix is small (DeepSeek-V4: n = hc_mult = 4), so one task runs whole matrices in the
// accumulate dtype. The backward recomputes the 2 * iters - 1 normalizations of its matrix, keeping
// each step's input in a per-task buffer, and runs them in reverse: for y = v / (s + eps) with s the
// sums along one axis, dv = (g - sum(g * y) along that axis) / (s + eps).
#include <algorithm>
#include <vector>

#include "tidal/backend/cpu/kernels.h"
#include "tidal/backend/cpu/vec_math.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

constexpr int64_t kGrainElems = 4096;

// Step k of the projection: even k normalizes columns (sums over the row index), odd k rows.
bool step_is_column(int64_t k) { return k % 2 == 0; }

// v := v / (sums along the step's axis + eps), in place; `sums` receives the n divisors.
template <typename A>
void normalize(A* v, A* sums, int64_t n, bool column, A eps) {
  for (int64_t i = 0; i < n; ++i) sums[i] = eps;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < n; ++c) sums[column ? c : r] += v[r * n + c];
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < n; ++c) v[r * n + c] /= sums[column ? c : r];
}

int64_t steps(const SinkhornArgs& a) { return 2 * a.iters - 1; }

template <typename T>
void forward(T* out, const T* x, const SinkhornArgs& a) {
  using A = acc_t<T>;
  const int64_t n = a.n, nn = n * n;
  parallel_for(0, a.matrices, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(nn, 1)), [&](int64_t b, int64_t e) {
    std::vector<A> v(static_cast<size_t>(nn)), sums(static_cast<size_t>(n));
    for (int64_t m = b; m < e; ++m) {
      for (int64_t i = 0; i < nn; ++i) v[i] = A(x[m * nn + i]);
      for (int64_t k = 0; k < steps(a); ++k) normalize(v.data(), sums.data(), n, step_is_column(k), A(a.eps));
      for (int64_t i = 0; i < nn; ++i) out[m * nn + i] = store_as<T>(v[i]);
    }
  });
}

template <typename T>
void backward(T* dx, const T* g, const T* x, const SinkhornArgs& a) {
  using A = acc_t<T>;
  const int64_t n = a.n, nn = n * n, k_steps = steps(a);
  parallel_for(0, a.matrices, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(nn * k_steps, 1)),
               [&](int64_t b, int64_t e) {
                 // outs[k]: the output of step k; divs[k]: its n divisors.
                 std::vector<A> outs(static_cast<size_t>(nn * k_steps)), divs(static_cast<size_t>(n * k_steps)),
                     grad(static_cast<size_t>(nn)), dots(static_cast<size_t>(n));
                 for (int64_t m = b; m < e; ++m) {
                   for (int64_t k = 0; k < k_steps; ++k) {
                     A* v = outs.data() + k * nn;
                     if (k == 0)
                       for (int64_t i = 0; i < nn; ++i) v[i] = A(x[m * nn + i]);
                     else
                       std::copy(v - nn, v, v);
                     normalize(v, divs.data() + k * n, n, step_is_column(k), A(a.eps));
                   }
                   for (int64_t i = 0; i < nn; ++i) grad[i] = A(g[m * nn + i]);
                   for (int64_t k = k_steps - 1; k >= 0; --k) {
                     const A* y = outs.data() + k * nn;
                     const A* s = divs.data() + k * n;
                     const bool column = step_is_column(k);
                     std::fill(dots.begin(), dots.end(), A(0));
                     for (int64_t r = 0; r < n; ++r)
                       for (int64_t c = 0; c < n; ++c) dots[column ? c : r] += grad[r * n + c] * y[r * n + c];
                     for (int64_t r = 0; r < n; ++r)
                       for (int64_t c = 0; c < n; ++c) {
                         const int64_t j = column ? c : r;
                         grad[r * n + c] = (grad[r * n + c] - dots[j]) / s[j];
                       }
                   }
                   for (int64_t i = 0; i < nn; ++i) dx[m * nn + i] = store_as<T>(grad[i]);
                 }
               });
}

}  // namespace

void CpuKernels::sinkhorn_forward(Stream&, const Tensor& out, const Tensor& x, const SinkhornArgs& a) {
  dispatch_float(x.dtype(), "sinkhorn", [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward(out.data<T>(), x.data<T>(), a);
  });
}

void CpuKernels::sinkhorn_backward(Stream&, const Tensor& dx, const Tensor& g, const Tensor& x, const SinkhornArgs& a) {
  dispatch_float(x.dtype(), "sinkhorn_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward(dx.data<T>(), g.data<T>(), x.data<T>(), a);
  });
}

}  // namespace tidal::cpu

// CPU kernels of attention over per-query kept keys (ops/attention.h sparse_attention_with_lse; DeepSeek-V4's
// compressed sparse attention): query row (b, i) attends, in every head, to the k keys kept[b, i, :] of its sample
// (-1: an empty slot). k is small (index_topk), so a row's scores live in a k-element buffer: no tiles, no BLAS.
// Forward tasks are rows of (b, i). The backward computes each row's P and dS = P (dP - delta) with dq in the same
// pass (parallel over rows), then dk / dv per key, each key summing its slots' terms in row order from an inverted
// index of kept built once: no two threads write one key, and the sums do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tidal/backend/cpu/attention_flash_tiles.h"
#include "tidal/backend/cpu/kernels.h"
#include "tidal/backend/cpu/vec_math.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

using flash_detail::View4;
using flash_detail::view4;

struct SparseDims {
  int64_t b, hq, t, d, hkv, w, dv, k, g;
  SparseDims(const Tensor& q, const Tensor& keys, const Tensor& values, const Tensor& kept)
      : b(q.size(0)),
        hq(q.size(1)),
        t(q.size(2)),
        d(q.size(3)),
        hkv(keys.size(1)),
        w(keys.size(2)),
        dv(values.size(3)),
        k(kept.size(2)),
        g(q.size(1) / keys.size(1)) {}
  // Query rows per parallel chunk: ~4096 multiply-adds' worth.
  int64_t row_grain() const { return std::max<int64_t>(1, 4096 / std::max<int64_t>(1, hq * k * (d + dv))); }
};

// The vector loops, with a unit-stride path the compiler vectorizes (heads are contiguous in practice).
template <typename T, typename A = acc_t<T>>
A dot(const T* x, int64_t sx, const T* y, int64_t sy, int64_t n) {
  A acc = 0;
  if (sx == 1 && sy == 1) {
#pragma omp simd reduction(+ : acc)
    for (int64_t c = 0; c < n; ++c) acc += A(x[c]) * A(y[c]);
    return acc;
  }
  for (int64_t c = 0; c < n; ++c) acc += A(x[c * sx]) * A(y[c * sy]);
  return acc;
}

// y += a x.
template <typename T, typename A>
void axpy(A* y, A a, const T* x, int64_t sx, int64_t n) {
  if (sx == 1) {
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) y[c] += a * A(x[c]);
    return;
  }
  for (int64_t c = 0; c < n; ++c) y[c] += a * A(x[c * sx]);
}

// Row (b, h, i)'s scores over its kept keys into s (-inf on empty slots); returns their maximum.
template <typename T, typename A = acc_t<T>>
A row_scores(const SparseDims& n, const View4<const T>& qv, const View4<const T>& kv, const int32_t* slots, A scale,
             int64_t b, int64_t h, int64_t i, A* s) {
  const T* qr = qv.row(b, h, i);
  A m = -std::numeric_limits<A>::infinity();
  for (int64_t j = 0; j < n.k; ++j) {
    s[j] = slots[j] < 0 ? -std::numeric_limits<A>::infinity()
                        : scale * dot<T>(qr, qv.s3, kv.row(b, h / n.g, slots[j]), kv.s3, n.d);
    m = std::max(m, s[j]);
  }
  return m;
}

template <typename T>
void forward_typed(double scale_d, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& keys,
                   const Tensor& values, const Tensor& kept) {
  using A = acc_t<T>;
  const SparseDims n(q, keys, values, kept);
  const View4<const T> qv = view4<const T>(q), kv = view4<const T>(keys), vv = view4<const T>(values);
  const View4<T> ov = view4<T>(out);
  A* lp = lse.data<A>();
  const int32_t* idx = kept.data<int32_t>();
  const A scale = A(scale_d);
  parallel_for(0, n.b * n.t, n.row_grain(), [&](int64_t r0, int64_t r1) {
    std::vector<A> s(size_t(n.k)), acc(size_t(n.dv));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / n.t, i = r % n.t;
      const int32_t* slots = idx + r * n.k;
      for (int64_t h = 0; h < n.hq; ++h) {
        const A m = row_scores<T>(n, qv, kv, slots, scale, b, h, i, s.data());
        T* o = ov.row(b, h, i);
        A* l = lp + (b * n.hq + h) * n.t + i;
        if (m == -std::numeric_limits<A>::infinity()) {  // no key kept: out 0, lse -inf (weighs 0 when merged)
          for (int64_t c = 0; c < n.dv; ++c) o[c * ov.s3] = T(0);
          *l = m;
          continue;
        }
        std::fill(acc.begin(), acc.end(), A(0));
        A sum = 0;
        for (int64_t j = 0; j < n.k; ++j) {
          if (slots[j] < 0) continue;
          const A p = fast_exp(s[size_t(j)] - m);
          sum += p;
          axpy(acc.data(), p, vv.row(b, h / n.g, slots[j]), vv.s3, n.dv);
        }
        for (int64_t c = 0; c < n.dv; ++c) o[c * ov.s3] = T(acc[size_t(c)] / sum);
        *l = m + std::log(sum);
      }
    }
  });
}

template <typename T>
void backward_typed(double scale_d, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                    const Tensor& dlse, const Tensor& q, const Tensor& keys, const Tensor& values, const Tensor& kept,
                    const Tensor& out, const Tensor& lse, const Tensor& workspace) {
  using A = acc_t<T>;
  const SparseDims n(q, keys, values, kept);
  const View4<const T> qv = view4<const T>(q), kv = view4<const T>(keys), vv = view4<const T>(values);
  const View4<const T> dov = view4<const T>(dout), ov = view4<const T>(out);
  const A* lp = lse.data<A>();
  const A* dl = dlse.defined() ? dlse.data<A>() : nullptr;
  const int32_t* idx = kept.data<int32_t>();
  const A scale = A(scale_d);
  // workspace: P and dS of every (b, i, h, slot), (B, T, Hq, k) each.
  A* prob = workspace.data<A>();
  A* dscore = prob + n.b * n.t * n.hq * n.k;
  const View4<T> dqv = dq.defined() ? view4<T>(dq) : View4<T>{};
  parallel_for(0, n.b * n.t, n.row_grain(), [&](int64_t r0, int64_t r1) {
    std::vector<A> s(size_t(n.k)), acc(size_t(n.d));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / n.t, i = r % n.t;
      const int32_t* slots = idx + r * n.k;
      for (int64_t h = 0; h < n.hq; ++h) {
        const int64_t row = (b * n.hq + h) * n.t + i;
        A* p = prob + (r * n.hq + h) * n.k;
        A* ds = dscore + (r * n.hq + h) * n.k;
        const T* g = dov.row(b, h, i);
        // delta = rowsum(dO * O) - dlse: the softmax backward's row term with the log-sum-exp's gradient.
        const A delta = dot<T>(g, dov.s3, ov.row(b, h, i), ov.s3, n.dv) - (dl != nullptr ? dl[row] : A(0));
        row_scores<T>(n, qv, kv, slots, scale, b, h, i, s.data());
        std::fill(acc.begin(), acc.end(), A(0));
        for (int64_t j = 0; j < n.k; ++j) {
          if (slots[j] < 0) {
            p[j] = ds[j] = 0;
            continue;
          }
          p[j] = fast_exp(s[size_t(j)] - lp[row]);
          ds[j] = p[j] * (dot<T>(g, dov.s3, vv.row(b, h / n.g, slots[j]), vv.s3, n.dv) - delta);
          axpy(acc.data(), ds[j], kv.row(b, h / n.g, slots[j]), kv.s3, n.d);
        }
        if (dq.defined()) {
          T* o = dqv.row(b, h, i);
          for (int64_t c = 0; c < n.d; ++c) o[c * dqv.s3] = T(scale * acc[size_t(c)]);
        }
      }
    }
  });
  if (!dk.defined() && !dv.defined()) return;
  // The slots that read each key, in row order: (b, key) -> the (row r, slot j) pairs with kept[r, j] = key.
  std::vector<int64_t> start(size_t(n.b * n.w + 1), 0), pairs(size_t(n.b * n.t * n.k));
  for (int64_t r = 0; r < n.b * n.t; ++r)
    for (int64_t j = 0; j < n.k; ++j)
      if (idx[r * n.k + j] >= 0) ++start[size_t((r / n.t) * n.w + idx[r * n.k + j] + 1)];
  for (size_t e = 1; e < start.size(); ++e) start[e] += start[e - 1];
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t r = 0; r < n.b * n.t; ++r)
    for (int64_t j = 0; j < n.k; ++j)
      if (idx[r * n.k + j] >= 0) pairs[size_t(fill[size_t((r / n.t) * n.w + idx[r * n.k + j])]++)] = r * n.k + j;
  const View4<T> dkv = dk.defined() ? view4<T>(dk) : View4<T>{}, dvv = dv.defined() ? view4<T>(dv) : View4<T>{};
  parallel_for(0, n.b * n.hkv * n.w, 16, [&](int64_t e0, int64_t e1) {
    std::vector<A> gk(size_t(n.d)), gv(size_t(n.dv));
    for (int64_t e = e0; e < e1; ++e) {
      const int64_t b = e / (n.hkv * n.w), kh = (e / n.w) % n.hkv, key = e % n.w;
      std::fill(gk.begin(), gk.end(), A(0));
      std::fill(gv.begin(), gv.end(), A(0));
      for (int64_t at = start[size_t(b * n.w + key)]; at < start[size_t(b * n.w + key + 1)]; ++at) {
        const int64_t r = pairs[size_t(at)] / n.k, j = pairs[size_t(at)] % n.k, i = r % n.t;
        for (int64_t h = kh * n.g; h < (kh + 1) * n.g; ++h) {
          const A p = prob[(r * n.hq + h) * n.k + j], ds = dscore[(r * n.hq + h) * n.k + j];
          axpy(gk.data(), ds, qv.row(b, h, i), qv.s3, n.d);
          axpy(gv.data(), p, dov.row(b, h, i), dov.s3, n.dv);
        }
      }
      if (dk.defined()) {
        T* o = dkv.row(b, kh, key);
        for (int64_t c = 0; c < n.d; ++c) o[c * dkv.s3] = T(scale * gk[size_t(c)]);
      }
      if (dv.defined()) {
        T* o = dvv.row(b, kh, key);
        for (int64_t c = 0; c < n.dv; ++c) o[c * dvv.s3] = T(gv[size_t(c)]);
      }
    }
  });
}

}  // namespace

int64_t CpuKernels::sparse_attention_backward_workspace(const Tensor& q, const Tensor& kept) const {
  return 2 * q.size(0) * q.size(2) * q.size(1) * kept.size(2);  // P and dS, (B, T, Hq, k) each
}

void CpuKernels::sparse_attention_forward(Stream&, double scale, const Tensor& out, const Tensor& lse, const Tensor& q,
                                          const Tensor& keys, const Tensor& values, const Tensor& kept) {
  dispatch_float(q.dtype(), "sparse_attention", [&](auto tag) {
    forward_typed<typename decltype(tag)::type>(scale, out, lse, q, keys, values, kept);
  });
}

void CpuKernels::sparse_attention_backward(Stream&, double scale, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                           const Tensor& dout, const Tensor& dlse, const Tensor& q, const Tensor& keys,
                                           const Tensor& values, const Tensor& kept, const Tensor& out,
                                           const Tensor& lse, const Tensor& workspace) {
  dispatch_float(q.dtype(), "sparse_attention", [&](auto tag) {
    backward_typed<typename decltype(tag)::type>(scale, dq, dk, dv, dout, dlse, q, keys, values, kept, out, lse,
                                                 workspace);
  });
}

}  // namespace tidal::cpu

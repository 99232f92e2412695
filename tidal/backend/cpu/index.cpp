#include "tidal/backend/cpu/index.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "tidal/backend/cpu/kernels.h"
#include "tidal/backend/cpu/vec_math.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

// Element offsets of every position of shape[from, to) (row-major) under `strides`.
std::vector<int64_t> position_offsets(const Shape& shape, const Shape& strides, int from, int to) {
  std::vector<int64_t> off{0};
  for (int d = from; d < to; ++d) {
    std::vector<int64_t> next;
    next.reserve(off.size() * size_t(shape[d]));
    for (int64_t a : off)
      for (int64_t c = 0; c < shape[d]; ++c) next.push_back(a + c * strides[d]);
    off = std::move(next);
  }
  return off;
}

// A trivially copyable type of `size` bytes: gather moves bits, it never converts.
template <typename F>
void dispatch_bits(int64_t size, F&& f) {
  switch (size) {
    case 1: return f(Tag<uint8_t>{});
    case 2: return f(Tag<uint16_t>{});
    case 4: return f(Tag<uint32_t>{});
    case 8: return f(Tag<uint64_t>{});
  }
  TIDAL_ASSERT(false, "no element type of ", size, " bytes");
}

template <typename T>
bool is_nan(T v) {
  return v != v;  // false for integers
}
// a > b with NaN above everything (PyTorch's order for sort and topk).
template <typename A>
bool greater_nan_high(A a, A b) {
  return is_nan(a) ? !is_nan(b) : a > b;
}

template <typename D, typename IT>
void gather_typed(const IndexOperand& out, const IndexOperand& x, const IndexOperand& idx, int64_t n) {
  const int64_t outer = int64_t(out.outer.size()), inner = int64_t(out.inner.size());
  const bool unit = out.inner_unit && x.inner_unit;
  parallel_for(0, outer * n, std::max<int64_t>(1, 32768 / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
    int64_t o = b / n, j = b % n;
    for (int64_t r = b; r < e; ++r, ++j) {
      if (j == n) {
        j = 0;
        ++o;
      }
      D* dst = reinterpret_cast<D*>(out.base) + out.outer[size_t(o)] + j * out.dim_stride;
      const IT* ip = reinterpret_cast<const IT*>(idx.base) + idx.outer[size_t(o)] + j * idx.dim_stride;
      const D* src = reinterpret_cast<const D*>(x.base) + x.outer[size_t(o)];
      if (idx.inner_zero) {  // one index per row (index_select, embedding-like): copy a row
        const D* s = src + int64_t(ip[0]) * x.dim_stride;
        if (inner == 1) {
          *dst = *s;
        } else if (unit) {
          std::memcpy(dst, s, size_t(inner) * sizeof(D));
        } else {
          for (int64_t i = 0; i < inner; ++i) dst[out.inner[size_t(i)]] = s[x.inner[size_t(i)]];
        }
      } else {
        for (int64_t i = 0; i < inner; ++i)
          dst[out.inner[size_t(i)]] = src[int64_t(ip[idx.inner[size_t(i)]]) * x.dim_stride + x.inner[size_t(i)]];
      }
    }
  });
}

template <typename T, typename IT>
void scatter_add_typed(const IndexOperand& out, const IndexOperand& src, const IndexOperand& idx, int64_t n) {
  using A = acc_t<T>;
  const int64_t outer = int64_t(idx.outer.size()), inner = int64_t(idx.inner.size());
  // Split the inner positions into blocks so that a single outer row still feeds every thread; the
  // split changes no result (each element's sum runs over j in order within one task).
  const int64_t max_blocks = std::max<int64_t>(1, (inner + 15) / 16);
  const int64_t blocks = std::clamp<int64_t>((2 * num_threads() + outer - 1) / outer, 1, max_blocks);
  const int64_t bs = (inner + blocks - 1) / blocks;
  const bool unit = out.inner_unit && src.inner_unit;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(n * bs, 1));
  parallel_for(0, outer * blocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t o = task / blocks, i0 = (task % blocks) * bs, i1 = std::min(inner, i0 + bs);
      T* obase = reinterpret_cast<T*>(out.base) + out.outer[size_t(o)];
      const T* sbase = reinterpret_cast<const T*>(src.base) + src.outer[size_t(o)];
      const IT* ibase = reinterpret_cast<const IT*>(idx.base) + idx.outer[size_t(o)];
      for (int64_t j = 0; j < n; ++j) {
        const T* s = sbase + j * src.dim_stride;
        const IT* ip = ibase + j * idx.dim_stride;
        if (idx.inner_zero) {
          T* d = obase + int64_t(ip[0]) * out.dim_stride;
          if (unit) {
#pragma omp simd
            for (int64_t i = i0; i < i1; ++i) d[i] = store_as<T>(A(d[i]) + A(s[i]));
          } else {
            for (int64_t i = i0; i < i1; ++i) {
              T& dst = d[out.inner[size_t(i)]];
              dst = T(A(dst) + A(s[src.inner[size_t(i)]]));
            }
          }
        } else {
          for (int64_t i = i0; i < i1; ++i) {
            T& dst = obase[int64_t(ip[idx.inner[size_t(i)]]) * out.dim_stride + out.inner[size_t(i)]];
            dst = T(A(dst) + A(s[src.inner[size_t(i)]]));
          }
        }
      }
    }
  });
}

// The order of sort and topk: a strictly before b. Desc puts larger values first; NaN counts as
// the largest value. Equal values are ordered by position (lower first) by the callers.
template <bool Desc, typename A>
bool before(A a, A b) {
  return Desc ? greater_nan_high(a, b) : greater_nan_high(b, a);
}

// Positions of the k first of keys[0, n) (ties: lower position), best first, into out[0, k).
template <bool Desc, typename A>
void select_top(const A* keys, int64_t n, int64_t k, int64_t* out, std::vector<int64_t>& scratch) {
  if (k == 0) return;
  if (k <= 16) {
    // One pass keeping the best k sorted: most values cost one compare with the current k-th.
    // A later equal value never passes an earlier one, so ties keep the lower position.
    A top[16];
    int64_t m = 0;
    for (int64_t j = 0; j < n; ++j) {
      const A v = keys[j];
      if (m == k && !before<Desc>(v, top[k - 1])) continue;
      int64_t p = m == k ? k - 1 : m++;
      for (; p > 0 && before<Desc>(v, top[p - 1]); --p) {
        top[p] = top[p - 1];
        out[p] = out[p - 1];
      }
      top[p] = v;
      out[p] = j;
    }
    return;
  }
  scratch.resize(size_t(n));
  std::iota(scratch.begin(), scratch.end(), int64_t(0));
  std::partial_sort(scratch.begin(), scratch.begin() + k, scratch.end(), [&](int64_t a, int64_t b) {
    return before<Desc>(keys[a], keys[b]) || (!before<Desc>(keys[b], keys[a]) && a < b);
  });
  std::copy(scratch.begin(), scratch.begin() + k, out);
}

// Stable sort of positions [0, n) by keys into out (total order: value, then position). Integer
// keys of a small range (expert ids) take a counting sort: one pass instead of n log n compares.
template <bool Desc, typename A>
void sort_positions(const A* keys, int64_t n, int64_t* out, std::vector<int64_t>& scratch) {
  if constexpr (std::is_integral_v<A>) {
    if (n >= 64) {
      const auto [lo_it, hi_it] = std::minmax_element(keys, keys + n);
      const int64_t lo = int64_t(*lo_it), range = int64_t(*hi_it) - lo + 1;
      if (range <= 4 * n) {
        scratch.assign(size_t(range) + 1, 0);
        auto bucket = [&](A v) { return size_t(Desc ? int64_t(*hi_it) - int64_t(v) : int64_t(v) - lo); };
        for (int64_t j = 0; j < n; ++j) ++scratch[bucket(keys[j]) + 1];
        for (int64_t b = 0; b < range; ++b) scratch[size_t(b) + 1] += scratch[size_t(b)];
        for (int64_t j = 0; j < n; ++j) out[scratch[bucket(keys[j])]++] = j;
        return;
      }
    }
  }
  std::iota(out, out + n, int64_t(0));
  std::sort(out, out + n, [&](int64_t a, int64_t b) {
    return before<Desc>(keys[a], keys[b]) || (!before<Desc>(keys[b], keys[a]) && a < b);
  });
}

// Calls row(o, i, keys, scratch) for every row of x split at `dim`: keys points at the row's n
// values (in place when contiguous, else loaded), scratch is a buffer the row may use.
template <typename T, typename Row>
void for_each_row(const Tensor& x, int dim, int64_t work_per_row, Row row) {
  using A = acc_t<T>;
  const IndexOperand xo = index_operand(x, x.shape(), dim);
  const int64_t n = x.shape()[dim], inner = int64_t(xo.inner.size());
  const int64_t rows = int64_t(xo.outer.size()) * inner;
  const bool in_place = std::is_same_v<T, A> && xo.dim_stride == 1;
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(work_per_row, 1)), [&](int64_t b, int64_t e) {
    std::vector<A> keys(in_place ? 0 : static_cast<size_t>(n));
    std::vector<int64_t> scratch;
    for (int64_t r = b; r < e; ++r) {
      const int64_t o = r / inner, i = r % inner;
      const T* p = reinterpret_cast<const T*>(xo.base) + xo.outer[size_t(o)] + xo.inner[size_t(i)];
      const A* k = reinterpret_cast<const A*>(p);
      if (!in_place) {
        for (int64_t j = 0; j < n; ++j) keys[size_t(j)] = A(p[j * xo.dim_stride]);
        k = keys.data();
      }
      row(o, i, k, scratch);
    }
  });
}

template <typename T, bool Desc>
void topk_typed(const Tensor& values, const Tensor& indices, const Tensor& x, int dim, int64_t k, bool sorted) {
  const int64_t n = x.shape()[dim];
  int64_t inner = 1;
  for (int d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  T* vp = values.data<T>();
  int64_t* ip = indices.data<int64_t>();
  for_each_row<T>(x, dim, n * 4, [&](int64_t o, int64_t i, const acc_t<T>* keys, std::vector<int64_t>& scratch) {
    int64_t small[16];
    std::vector<int64_t> large(k > 16 ? size_t(k) : 0);
    int64_t* picked = k > 16 ? large.data() : small;
    select_top<Desc>(keys, n, k, picked, scratch);
    if (!sorted) std::sort(picked, picked + k);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t at = (o * k + j) * inner + i;
      vp[at] = T(keys[picked[j]]);
      ip[at] = picked[j];
    }
  });
}

template <typename T, bool Desc>
void argsort_typed(const Tensor& indices, const Tensor& x, int dim) {
  const int64_t n = x.shape()[dim];
  int64_t inner = 1;
  for (int d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  int64_t* ip = indices.data<int64_t>();
  for_each_row<T>(x, dim, n * 16, [&](int64_t o, int64_t i, const acc_t<T>* keys, std::vector<int64_t>& scratch) {
    if (inner == 1) {
      sort_positions<Desc>(keys, n, ip + o * n, scratch);
      return;
    }
    std::vector<int64_t> order(static_cast<size_t>(n));
    sort_positions<Desc>(keys, n, order.data(), scratch);
    for (int64_t j = 0; j < n; ++j) ip[(o * n + j) * inner + i] = order[size_t(j)];
  });
}

}  // namespace

IndexOperand index_operand(const Tensor& t, const Shape& iter, int dim) {
  TIDAL_ASSERT(t.dim() == iter.size() && dim >= 0 && dim < iter.size(), "operand ", t.shape(), " over ", iter,
               " at dim ", dim);
  IndexOperand op;
  op.base = static_cast<char*>(t.raw_data());
  op.itemsize = t.itemsize();
  op.dim_stride = t.strides()[dim];
  op.outer = position_offsets(iter, t.strides(), 0, dim);
  op.inner = position_offsets(iter, t.strides(), dim + 1, iter.size());
  op.inner_unit = op.inner_zero = true;
  for (size_t i = 0; i < op.inner.size(); ++i) {
    op.inner_unit = op.inner_unit && op.inner[i] == int64_t(i);
    op.inner_zero = op.inner_zero && op.inner[i] == 0;
  }
  return op;
}

// out[o, j, i] = x[o, index[o, j, i], i] over out's shape; out, x and index are operands over it.
void CpuKernels::gather(Stream&, const Tensor& out, const Tensor& x, const Tensor& index, int dim) {
  const Shape& iter = out.shape();
  if (iter.numel() == 0) return;
  const IndexOperand oo = index_operand(out, iter, dim), xo = index_operand(x, iter, dim),
                     io = index_operand(index, iter, dim);
  dispatch_index(index.dtype(), "gather", [&](auto itag) {
    using IT = typename decltype(itag)::type;
    dispatch_bits(x.itemsize(),
                  [&](auto dtag) { gather_typed<typename decltype(dtag)::type, IT>(oo, xo, io, iter[dim]); });
  });
}

// out[o, index[o, j, i], i] += src[o, j, i] over index's shape. Every out element receives its
// contributions in increasing j, so the result is deterministic and independent of the threads
// (the loop runs in parallel over (o, i) only).
void CpuKernels::scatter_add(Stream&, const Tensor& out, const Tensor& src, const Tensor& index, int dim) {
  const Shape& iter = index.shape();
  if (iter.numel() == 0) return;
  const IndexOperand oo = index_operand(out, iter, dim), so = index_operand(src, iter, dim),
                     io = index_operand(index, iter, dim);
  dispatch_index(index.dtype(), "scatter_add", [&](auto itag) {
    using IT = typename decltype(itag)::type;
    dispatch_all(out.dtype(), "scatter_add",
                 [&](auto tag) { scatter_add_typed<typename decltype(tag)::type, IT>(oo, so, io, iter[dim]); });
  });
}

// Flat (row-major) position of the first element of `index` (i32/i64) outside [0, limit), or -1.
int64_t CpuKernels::first_out_of_range(Stream&, const Tensor& index, int64_t limit) {
  TIDAL_ASSERT(index.is_contiguous(), "first_out_of_range needs a contiguous index, got strides ", index.strides());
  constexpr int64_t kChunk = 65536;
  const int64_t n = index.numel(), chunks = (n + kChunk - 1) / kChunk;
  std::vector<int64_t> first(size_t(chunks), -1);
  dispatch_index(index.dtype(), "index", [&](auto itag) {
    using IT = typename decltype(itag)::type;
    const IT* p = index.data<IT>();
    parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
        bool bad = false;  // a vectorized test first; the position only when there is one
#pragma omp simd reduction(| : bad)
        for (int64_t i = begin; i < end; ++i) bad |= uint64_t(int64_t(p[i])) >= uint64_t(limit);  // negatives wrap
        if (!bad) continue;
        for (int64_t i = begin; i < end && first[size_t(c)] < 0; ++i)
          if (uint64_t(int64_t(p[i])) >= uint64_t(limit)) first[size_t(c)] = i;
      }
    });
  });
  for (int64_t f : first)
    if (f >= 0) return f;
  return -1;
}

// values/indices (outer, k, inner) = the k largest (or smallest) of x (outer, n, inner) along the
// middle dim; ties go to the lower index and NaN counts as the largest value. `sorted`: in order
// of value, else in increasing index order. x may have any strides (an operand split at `dim`).
void CpuKernels::topk(Stream&, const Tensor& values, const Tensor& indices, const Tensor& x, int dim, int64_t k,
                      bool largest, bool sorted) {
  if (values.numel() == 0) return;
  dispatch_all(x.dtype(), "topk", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (largest)
      topk_typed<T, true>(values, indices, x, dim, k, sorted);
    else
      topk_typed<T, false>(values, indices, x, dim, k, sorted);
  });
}

// indices (x's shape, i64) = a stable argsort of x along `dim` (NaN last ascending, first descending).
void CpuKernels::argsort(Stream&, const Tensor& indices, const Tensor& x, int dim, bool descending) {
  if (x.numel() == 0) return;
  dispatch_all(x.dtype(), "argsort", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (descending)
      argsort_typed<T, true>(indices, x, dim);
    else
      argsort_typed<T, false>(indices, x, dim);
  });
}

// counts (i64, zero-filled by the caller) [v] += 1 for every value v of index (1-D, in range).
void CpuKernels::bincount(Stream&, const Tensor& counts, const Tensor& index) {
  TIDAL_ASSERT(index.is_contiguous() && counts.is_contiguous(), "bincount needs contiguous tensors");
  int64_t* c = counts.data<int64_t>();
  const int64_t n = index.numel();
  dispatch_index(index.dtype(), "bincount", [&](auto itag) {
    using IT = typename decltype(itag)::type;
    const IT* p = index.data<IT>();
    for (int64_t i = 0; i < n; ++i) ++c[int64_t(p[i])];
  });
}

// The largest value of a non-empty index tensor (i32/i64), and the smallest through `min_out`.
int64_t CpuKernels::index_max(Stream&, const Tensor& index, int64_t* min_out) {
  TIDAL_ASSERT(index.is_contiguous() && index.numel() > 0, "index_max needs a contiguous non-empty index");
  const int64_t n = index.numel();
  return dispatch_index(index.dtype(), "index", [&](auto itag) {
    using IT = typename decltype(itag)::type;
    const IT* p = index.data<IT>();
    IT lo = p[0], hi = p[0];
#pragma omp simd reduction(min : lo) reduction(max : hi)
    for (int64_t i = 0; i < n; ++i) {
      lo = std::min(lo, p[i]);
      hi = std::max(hi, p[i]);
    }
    if (min_out) *min_out = int64_t(lo);
    return int64_t(hi);
  });
}

}  // namespace tidal::cpu

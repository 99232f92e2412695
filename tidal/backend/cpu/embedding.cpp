// CPU kernels of the embedding lookup. ids are contiguous i32/i64, already checked to lie in [0, V).
#include "tidal/backend/cpu/kernels.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

template <typename T, typename IT>
void forward_typed(const Tensor& out, const Tensor& weight, const Tensor& ids) {
  const int64_t n = ids.numel(), c = weight.shape()[1];
  const int64_t rs = weight.strides()[0], cs = weight.strides()[1];
  const T* w = weight.data<T>();
  const IT* ip = ids.data<IT>();
  T* o = out.data<T>();
  parallel_for(0, n, std::max<int64_t>(1, 32768 / std::max<int64_t>(c, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* src = w + int64_t(ip[r]) * rs;
      T* dst = o + r * c;
      if (cs == 1) {
        std::memcpy(dst, src, size_t(c) * sizeof(T));
      } else {
        for (int64_t j = 0; j < c; ++j) dst[j] = src[j * cs];
      }
    }
  });
}

template <typename T, typename IT>
void backward_typed(const Tensor& grad_weight, const Tensor& g, const Tensor& ids) {
  using A = acc_t<T>;
  const int64_t v_count = grad_weight.shape()[0], c = grad_weight.shape()[1], n = ids.numel();
  const IT* ip = n ? ids.data<IT>() : nullptr;
  const T* gp = n ? g.data<T>() : nullptr;
  T* gw = grad_weight.data<T>();
  // Counting sort of positions by id (stable). After placement end[v] is the end of v's run and
  // the run starts at end[v - 1] (0 for v = 0).
  std::vector<int64_t> end(size_t(v_count) + 1, 0);
  for (int64_t r = 0; r < n; ++r) ++end[size_t(ip[r]) + 1];
  for (int64_t v = 0; v < v_count; ++v) end[size_t(v) + 1] += end[size_t(v)];
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) order[size_t(end[size_t(ip[r])]++)] = r;
  parallel_for(0, v_count, std::max<int64_t>(1, 16384 / std::max<int64_t>(c, 1)), [&](int64_t b, int64_t e) {
    std::vector<A> acc(std::is_same_v<T, A> ? 0 : size_t(c));
    for (int64_t v = b; v < e; ++v) {
      T* row = gw + v * c;
      const int64_t first = v ? end[size_t(v) - 1] : 0, last = end[size_t(v)];
      if (first == last) {
        std::memset(static_cast<void*>(row), 0, size_t(c) * sizeof(T));  // +0.0 is all zero bits
        continue;
      }
      A* dst = nullptr;
      if constexpr (std::is_same_v<T, A>)
        dst = row;
      else
        dst = acc.data();
      const T* g0 = gp + order[size_t(first)] * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) dst[j] = A(g0[j]);
      for (int64_t m = first + 1; m < last; ++m) {
        const T* gr = gp + order[size_t(m)] * c;
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) dst[j] += A(gr[j]);
      }
      if constexpr (!std::is_same_v<T, A>) {
        for (int64_t j = 0; j < c; ++j) row[j] = T(dst[j]);
      }
    }
  });
}

}  // namespace

// out (N, C) contiguous = weight (V, C) rows ids[n]; the weight may have any strides.
void CpuKernels::embedding_forward(Stream&, const Tensor& out, const Tensor& weight, const Tensor& ids) {
  if (out.numel() == 0) return;
  TIDAL_ASSERT(ids.is_contiguous() && out.is_contiguous(), "embedding_forward needs contiguous ids and output");
  dispatch_index(ids.dtype(), "embedding", [&](auto itag) {
    dispatch_float(weight.dtype(), "embedding", [&](auto tag) {
      forward_typed<typename decltype(tag)::type, typename decltype(itag)::type>(out, weight, ids);
    });
  });
}

// grad_weight (V, C) contiguous, every row written: row v = the sum of g (N, C) rows n with
// ids[n] == v, added in increasing n (zeros when v does not occur). A counting sort of the ids
// makes the rows independent, so they run in parallel without atomics and the result does not
// depend on the number of threads. bf16 rows accumulate in f32 and round once.
void CpuKernels::embedding_backward(Stream&, const Tensor& grad_weight, const Tensor& g, const Tensor& ids) {
  if (grad_weight.numel() == 0) return;
  TIDAL_ASSERT(ids.is_contiguous() && g.is_contiguous() && grad_weight.is_contiguous(),
               "embedding_backward needs contiguous tensors");
  dispatch_index(ids.dtype(), "embedding", [&](auto itag) {
    dispatch_float(grad_weight.dtype(), "embedding", [&](auto tag) {
      backward_typed<typename decltype(tag)::type, typename decltype(itag)::type>(grad_weight, g, ids);
    });
  });
}

}  // namespace tidal::cpu

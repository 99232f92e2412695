#pragma once
// Elementwise loops over N operands of one iteration shape with arbitrary byte strides (0 for a
// broadcast dim). Dims that are laid out back to back in every operand are merged first, so the
// common cases (contiguous, bias broadcast, transposed views) run as long inner loops.
#include <array>
#include <cstdint>

#include "tidal/base/parallel.h"
#include "tidal/shape.h"
#include "tidal/tensor.h"

namespace tidal::cpu {

// Byte strides of `t` when broadcast (NumPy-aligned to the right) to `shape`.
Shape broadcast_byte_strides(const Tensor& t, const Shape& shape);

template <int N>
struct StridedLoop {
  Shape shape;                   // iteration shape after merging
  std::array<char*, N> base{};   // first element of each operand
  std::array<Shape, N> strides;  // byte strides per operand over `shape`
};

template <int N>
StridedLoop<N> make_loop(const Shape& shape, const std::array<char*, N>& base, const std::array<Shape, N>& strides) {
  StridedLoop<N> loop;
  loop.base = base;
  // Drop size-1 dims, then merge each dim into the next (inner) one when every operand allows.
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const int last = loop.shape.size() - 1;
    bool merge = last >= 0;
    for (int k = 0; k < N && merge; ++k) merge = loop.strides[k][last] == strides[k][d] * shape[d];
    if (merge) {
      loop.shape[last] *= shape[d];
      for (int k = 0; k < N; ++k) loop.strides[k][last] = strides[k][d];
    } else {
      loop.shape.push_back(shape[d]);
      for (int k = 0; k < N; ++k) loop.strides[k].push_back(strides[k][d]);
    }
  }
  return loop;
}

// Calls inner(ptrs, inner_strides, n) over runs of the innermost dim. The flat element range is
// split evenly across threads when the loop has more than `grain` elements, so a single long
// contiguous run is shared too (runs are cut at the split points).
template <int N, typename F>
void for_each(const StridedLoop<N>& loop, int64_t grain, F&& inner) {
  const int nd = loop.shape.size();
  const int64_t total = loop.shape.numel();
  if (total == 0) return;  // an empty tensor: nothing to visit
  if (nd == 0) {
    std::array<int64_t, N> zero{};
    inner(loop.base, zero, int64_t(1));
    return;
  }
  const int64_t n_inner = loop.shape[nd - 1];
  std::array<int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = loop.strides[k][nd - 1];
  parallel_for(0, total, grain, [&](int64_t begin, int64_t end) {
    int64_t idx[Shape::kMaxDims] = {};
    int64_t rem = begin;
    std::array<char*, N> ptrs = loop.base;
    for (int d = nd - 1; d >= 0; --d) {
      idx[d] = rem % loop.shape[d];
      rem /= loop.shape[d];
      for (int k = 0; k < N; ++k) ptrs[k] += idx[d] * loop.strides[k][d];
    }
    for (int64_t pos = begin; pos < end;) {
      const int64_t run = std::min(n_inner - idx[nd - 1], end - pos);
      inner(ptrs, inner_strides, run);
      pos += run;
      idx[nd - 1] += run;
      for (int k = 0; k < N; ++k) ptrs[k] += run * inner_strides[k];
      if (idx[nd - 1] < n_inner) continue;
      for (int k = 0; k < N; ++k) ptrs[k] -= n_inner * inner_strides[k];
      idx[nd - 1] = 0;
      for (int d = nd - 2; d >= 0; --d) {
        for (int k = 0; k < N; ++k) ptrs[k] += loop.strides[k][d];
        if (++idx[d] < loop.shape[d]) break;
        for (int k = 0; k < N; ++k) ptrs[k] -= loop.strides[k][d] * loop.shape[d];
        idx[d] = 0;
      }
    }
  });
}

// Elements per parallel task for memory-bound loops.
inline constexpr int64_t kElementwiseGrain = 32768;

}  // namespace tidal::cpu

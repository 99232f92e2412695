#pragma once
// The CPU flash attention kernels' tile machinery (attention_flash.cpp): strided tiles as BLAS
// operands, tile products (oneDNN for bf16), stores, Philox dropout factors, per-slot workspace
// arenas and the static task split. Internal to the flash kernels.
#include <algorithm>
#include <initializer_list>
#include <type_traits>

#include "tidal/backend/cpu/blas.h"
#include "tidal/backend/cpu/onednn_matmul.h"
#include "tidal/backend/cpu/philox.h"
#include "tidal/backend/cpu/vec_math.h"
#include "tidal/base/parallel.h"
#include "tidal/tensor.h"

namespace tidal::cpu::flash_detail {

// A (B, H, L, D) tensor as a pointer and element strides.
template <typename T>
struct View4 {
  T* p = nullptr;
  int64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  T* row(int64_t b, int64_t h, int64_t i) const { return p + b * s0 + h * s1 + i * s2; }
};

template <typename T>
View4<T> view4(const Tensor& t) {
  return {static_cast<T*>(t.raw_data()), t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

template <typename A>
struct Mat {
  const A* p;
  int64_t ld;
};

// A rows x cols block at `base` (row stride rs, column stride cs) as the BLAS wants it: the memory
// itself when it has the accumulate type and unit column stride, else a packed copy in `buf`.
template <typename A, typename T>
Mat<A> tile(const T* base, int64_t rs, int64_t cs, int64_t rows, int64_t cols, A* buf) {
  if constexpr (std::is_same_v<T, A>) {
    if (cs == 1 && (rs >= cols || rows == 1)) return {base, std::max(rs, cols)};
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T* src = base + r * rs;
    A* dst = buf + r * cols;
    if (cs == 1) {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) dst[c] = A(src[c]);
    } else {
      for (int64_t c = 0; c < cols; ++c) dst[c] = A(src[c * cs]);
    }
  }
  return {buf, cols};
}

// The type a tile product reads: bf16 tiles multiply in bf16 (f32 accumulation), others in their
// accumulate type.
template <typename T>
using gemm_t = std::conditional_t<std::is_same_v<T, BFloat16>, BFloat16, acc_t<T>>;

// C (f32/f64, row-major) = alpha op(A) op(B) + beta C for one tile, on this thread.
inline void tile_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, Mat<float> a, Mat<float> b,
                      float beta, float* c, int64_t ldc) {
  blas::gemm(ta, tb, m, n, k, alpha, a.p, a.ld, b.p, b.ld, beta, c, ldc);
}
inline void tile_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, Mat<double> a, Mat<double> b,
                      double beta, double* c, int64_t ldc) {
  blas::gemm(ta, tb, m, n, k, alpha, a.p, a.ld, b.p, b.ld, beta, c, ldc);
}
inline void tile_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, Mat<BFloat16> a, Mat<BFloat16> b,
                      float beta, float* c, int64_t ldc) {
  onednn::gemm(ta, tb, m, n, k, alpha, a.p, a.ld, b.p, b.ld, beta, c, ldc);
}

// A rows x cols block of accumulate-type values (row stride ld) as a product's operand: itself, or
// rounded into `buf` (rows x cols) for a bf16 product.
template <typename G, typename A>
Mat<G> operand(const A* src, int64_t ld, int64_t rows, int64_t cols, G* buf) {
  if constexpr (std::is_same_v<G, A>) {
    return {src, ld};
  } else {
    for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) buf[r * cols + c] = store_as<G>(src[r * ld + c]);
    }
    return {buf, cols};
  }
}

// Writes a packed rows x cols block of A into a strided T destination.
template <typename T, typename A>
void store(T* dst, int64_t rs, int64_t cs, const A* src, int64_t rows, int64_t cols, A factor = A(1)) {
  for (int64_t r = 0; r < rows; ++r) {
    T* d = dst + r * rs;
    const A* sr = src + r * cols;
    if (cs == 1) {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) d[c] = store_as<T>(sr[c] * factor);
    } else {
      for (int64_t c = 0; c < cols; ++c) d[c * cs] = T(sr[c] * factor);
    }
  }
}

// z[c] = keep_scale where the Philox uniform of stream position pos0 + c is >= p, else 0: the rule of
// tidal::dropout, so this kernel draws the mask the eager path's dropout op draws.
template <typename A>
void dropout_factors(uint64_t seed, uint64_t pos0, int64_t n, float p, A keep_scale, A* z, uint32_t* bits) {
  const uint64_t first = pos0 / 4;
  const int64_t lane0 = int64_t(pos0 % 4), blocks = (lane0 + n + 3) / 4;
  philox4x32_fill(first, seed, blocks, bits);
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) z[c] = u32_to_unit(bits[lane0 + c]) >= p ? keep_scale : A(0);
}

// Bump allocation from a per-slot workspace, 64-byte aligned pieces.
template <typename A>
struct Arena {
  A* p;
  A* take(int64_t n) {
    A* r = p;
    p += (n + 15) / 16 * 16;
    return r;
  }
  uint32_t* take_bits(int64_t n) { return take_as<uint32_t>(n); }
  // n elements of another type (bf16 tiles; the slot's bytes are only ever used as that type).
  template <typename U>
  U* take_as(int64_t n) {
    return reinterpret_cast<U*>(take((n * int64_t(sizeof(U)) + int64_t(sizeof(A)) - 1) / int64_t(sizeof(A))));
  }
};
inline int64_t arena_size(std::initializer_list<int64_t> pieces) {
  int64_t n = 0;
  for (int64_t k : pieces) n += (k + 15) / 16 * 16;
  return n;
}

// How many workspace slots (threads) `tasks` tasks worth `flops` in all deserve: at least ~1 MFLOP
// each, so tiny problems (gradchecks, decoding) do not pay for a parallel region.
inline int64_t slots_for(int64_t tasks, double flops) {
  const int64_t by_work = int64_t(flops / double(1 << 20)) + 1;
  return std::max<int64_t>(1, std::min<int64_t>({int64_t(num_threads()), tasks, by_work}));
}

// Runs f(task, slot) for tasks [0, n) split statically over `slots` slots; slot s owns workspace
// row s. The split never changes a result: tasks share no accumulator.
// One slot runs on the calling thread with OpenMP's team size set to 1 meanwhile: its tile products (oneDNN's sgemm
// sizes its team from omp_get_max_threads()) stay single-threaded, as inside a parallel region, instead of starting
// a team for every tile (a 32k-token MQA backward spent ~5x its compute waking threads).
template <typename F>
void for_tasks(int64_t n, int64_t slots, F&& f) {
  if (slots == 1 && !omp_in_parallel()) {
    const int team = omp_get_max_threads();
    omp_set_num_threads(1);
    try {
      for (int64_t task = 0; task < n; ++task) f(task, int64_t(0));
    } catch (...) {
      omp_set_num_threads(team);
      throw;
    }
    omp_set_num_threads(team);
    return;
  }
  parallel_for(0, slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s)
      for (int64_t task = s * n / slots; task < (s + 1) * n / slots; ++task) f(task, s);
  });
}

}  // namespace tidal::cpu::flash_detail

// CPU kernels of the random family (ops/random.h): Philox draws at stream positions start + i.
#include "tidal/backend/cpu/kernels.h"

#include <algorithm>

#include "tidal/backend/cpu/philox.h"
#include "tidal/backend/cpu/vec_math.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {

void CpuKernels::random_fill(Stream&, const Tensor& out, Distribution dist, uint64_t seed, uint64_t start) {
  dispatch_float(out.dtype(), dist == Distribution::uniform ? "rand" : "randn", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    parallel_for(0, out.numel(), 16384, [&](int64_t b, int64_t e) {
      if (dist == Distribution::uniform) {
        for (int64_t i = b; i < e; ++i) p[i] = T(acc_t<T>(philox_uniform(seed, start + uint64_t(i))));
      } else {
        for (int64_t i = b; i < e; ++i) p[i] = T(acc_t<T>(philox_normal(seed, start + uint64_t(i))));
      }
    });
  });
}

void CpuKernels::randint_fill(Stream&, const Tensor& out, int64_t low, int64_t high, uint64_t seed, uint64_t start) {
  const uint64_t range = uint64_t(high - low);
  dispatch_index(out.dtype(), "randint", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    parallel_for(0, out.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const uint64_t pos = start + uint64_t(i);
        const uint32_t r = philox4x32(pos / 4, seed)[pos % 4];
        p[i] = T(low + int64_t(uint64_t(r) * range >> 32));
      }
    });
  });
}

namespace {

// The mask and the scaling of n elements from their uniform bits, as one vectorized loop: keep where
// the uniform is >= p; out = keep ? x * scale : 0, mask = keep.
template <typename T, typename A>
inline void apply_dropout(const uint32_t* bits, const T* x, T* out, uint8_t* mask, int64_t n, float p, A scale) {
#pragma omp simd
  for (int64_t e = 0; e < n; ++e) {
    const bool keep = u32_to_unit(bits[e]) >= p;
    mask[e] = uint8_t(keep);
    out[e] = store_as<T>(keep ? A(x[e]) * scale : A(0));
  }
}

}  // namespace

void CpuKernels::dropout_forward(Stream&, const Tensor& out, const Tensor& mask, const Tensor& x, double p,
                                 double scale, uint64_t seed, uint64_t start) {
  const float pf = float(p);
  dispatch_float(x.dtype(), "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* xp = x.data<T>();
    T* op = out.data<T>();
    uint8_t* mp = mask.data<uint8_t>();
    const A sc = A(scale);
    // One Philox block gives 4 consecutive positions (start is a multiple of 4); blocks are drawn
    // 256 at a time into a buffer, then the mask and the scaling run as one vectorized loop.
    const int64_t n = x.numel(), blocks = (n + 3) / 4;
    constexpr int64_t kChunk = 256;  // blocks per buffer
    parallel_for(0, (blocks + kChunk - 1) / kChunk, 16, [&](int64_t c0, int64_t c1) {
      alignas(64) uint32_t bits[4 * kChunk];
      const T* x_ = xp;  // locals: pointers read through the closure keep the loop scalar
      T* o_ = op;
      uint8_t* m_ = mp;
      const float p_ = pf;
      const A s_ = sc;
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t b0 = c * kChunk, nb = std::min(kChunk, blocks - b0);
        philox4x32_fill(start / 4 + uint64_t(b0), seed, nb, bits);
        const int64_t i0 = b0 * 4;
        apply_dropout(bits, x_ + i0, o_ + i0, m_ + i0, std::min(nb * 4, n - i0), p_, s_);
      }
    });
  });
}

// dropout_forward at the positions of DropoutRowsArgs (kernel_args.h): row by row, each row's draw
// starting at any position (not only a multiple of 4).
void CpuKernels::dropout_rows_forward(Stream&, const DropoutRowsArgs& a, const Tensor& out, const Tensor& mask,
                                      const Tensor& x, double p, double scale) {
  dispatch_float(x.dtype(), "dropout_rows", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t rows = a.outer * a.rows, inner = a.inner;
    constexpr int64_t kSpan = 1024;  // elements per Philox buffer
    parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)), [&](int64_t r0, int64_t r1) {
      alignas(64) uint32_t bits[kSpan + 8];  // a row piece may start mid-block: up to 3 lanes before it
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t o = r / a.rows, t = r % a.rows;
        const int64_t g = a.row_map ? a.row_map[t] : a.row_offset + t;
        const uint64_t row_pos = a.start + uint64_t((o * a.global_rows + g) * a.global_inner + a.col_offset);
        for (int64_t c0 = 0; c0 < inner; c0 += kSpan) {
          const int64_t n = std::min(kSpan, inner - c0), at = r * inner + c0;
          const uint64_t pos = row_pos + uint64_t(c0);
          const int64_t lane0 = int64_t(pos % 4);
          philox4x32_fill(pos / 4, a.seed, (lane0 + n + 3) / 4, bits);
          apply_dropout(bits + lane0, x.data<T>() + at, out.data<T>() + at, mask.data<uint8_t>() + at, n, float(p),
                        acc_t<T>(scale));
        }
      }
    });
  });
}

// dx = g * mask * scale in one pass (no f32 copy of the mask).
void CpuKernels::dropout_backward(Stream&, const Tensor& dx, const Tensor& g, const Tensor& mask, double scale) {
  dispatch_float(g.dtype(), "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* gp = g.data<T>();
    const uint8_t* mp = mask.data<uint8_t>();
    T* op = dx.data<T>();
    const A sc = A(scale);
    parallel_for(0, g.numel(), 32768, [&](int64_t b, int64_t e) {
      const T* g_ = gp;  // locals, so the loop vectorizes
      const uint8_t* m_ = mp;
      T* o_ = op;
      const A s_ = sc;
#pragma omp simd
      for (int64_t i = b; i < e; ++i) o_[i] = store_as<T>(m_[i] ? A(g_[i]) * s_ : A(0));
    });
  });
}

}  // namespace tidal::cpu

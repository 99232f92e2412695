// CPU kernels of rotary position embedding (Hugging Face Llama layout: the two halves of the head
// dim are rotated against each other). See tidal/ops/rope.h.
#include "tidal/backend/cpu/kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "tidal/backend/cpu/vec_math.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

template <typename T>
void tables_typed(const Tensor& cos, const Tensor& sin, const RopeTableArgs& a) {
  const int64_t seq = cos.size(0), dim = cos.size(1), half = dim / 2;
  T* cp = cos.data<T>();
  T* sp = sin.data<T>();
  parallel_for(0, seq, std::max<int64_t>(1, 4096 / std::max<int64_t>(half, 1)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const double pos = double(a.position_offset + t);
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * a.inv_freq[i];
        const T c = T(acc_t<T>(std::cos(angle) * a.attention_scaling));
        const T s = T(acc_t<T>(std::sin(angle) * a.attention_scaling));
        cp[t * dim + i] = cp[t * dim + half + i] = c;
        sp[t * dim + i] = sp[t * dim + half + i] = s;
      }
    }
  });
}

// One row of D elements. Forward: lo' = lo*c_lo - hi*s_lo, hi' = hi*c_hi + lo*s_hi. Transpose:
// lo' = lo*c_lo + hi*s_hi, hi' = hi*c_hi - lo*s_lo. Written once with (sa, sign) and (sb, -sign).
template <typename T>
struct RopeRow {
  int64_t half;
  bool transpose;

  void contiguous(T* o, const T* x, const T* c, const T* s) const {
    using A = acc_t<T>;
    const T* sa = transpose ? s + half : s;
    const T* sb = transpose ? s : s + half;
    const A sign = transpose ? A(1) : A(-1);
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const A lo = A(x[i]), hi = A(x[i + half]);
      o[i] = store_as<T>(lo * A(c[i]) + sign * hi * A(sa[i]));
      o[i + half] = store_as<T>(hi * A(c[i + half]) - sign * lo * A(sb[i]));
    }
  }

  void strided(T* o, int64_t so, const T* x, int64_t sx, const T* c, int64_t sc, const T* s, int64_t ss) const {
    using A = acc_t<T>;
    const int64_t a_off = transpose ? half : 0, b_off = transpose ? 0 : half;
    const A sign = transpose ? A(1) : A(-1);
    for (int64_t i = 0; i < half; ++i) {
      const A lo = A(x[i * sx]), hi = A(x[(i + half) * sx]);
      o[i * so] = T(lo * A(c[i * sc]) + sign * hi * A(s[(i + a_off) * ss]));
      o[(i + half) * so] = T(hi * A(c[(i + half) * sc]) - sign * lo * A(s[(i + b_off) * ss]));
    }
  }
};

template <typename T>
void rope_typed(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin, bool transpose) {
  const int64_t dim = x.size(3);
  // Walk the rows in the output's memory order (outer dims sorted by stride) for sequential access.
  std::array<int, 3> order{0, 1, 2};
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return out.stride(a) > out.stride(b); });
  const int64_t n1 = out.size(order[1]), n2 = out.size(order[2]);
  const int64_t rows = out.size(0) * out.size(1) * out.size(2);
  const T* xp = x.data<T>();
  T* op = out.data<T>();
  const T* cp = cos.data<T>();
  const T* sp = sin.data<T>();
  // A (T, D) table serves every sample; a (B, T, D) one (packed documents' positions) one per sample.
  const int64_t tdim = cos.dim() - 2;
  const int64_t scb = tdim ? cos.stride(0) : 0, ssb = tdim ? sin.stride(0) : 0;
  const int64_t sct = cos.stride(tdim), sst = sin.stride(tdim);
  const int64_t sxd = x.stride(3), sod = out.stride(3), scd = cos.stride(tdim + 1), ssd = sin.stride(tdim + 1);
  const bool unit = sxd == 1 && sod == 1 && scd == 1 && ssd == 1;
  const RopeRow<T> row{dim / 2, transpose};
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(dim, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t idx[3];
      idx[order[2]] = r % n2;
      idx[order[1]] = (r / n2) % n1;
      idx[order[0]] = r / (n2 * n1);
      const int64_t t = idx[2];
      const T* xr = xp + idx[0] * x.stride(0) + idx[1] * x.stride(1) + t * x.stride(2);
      T* orow = op + idx[0] * out.stride(0) + idx[1] * out.stride(1) + t * out.stride(2);
      const T* cr = cp + idx[0] * scb + t * sct;
      const T* sr = sp + idx[0] * ssb + t * sst;
      if (unit)
        row.contiguous(orow, xr, cr, sr);
      else
        row.strided(orow, sod, xr, sxd, cr, scd, sr, ssd);
    }
  });
}

}  // namespace

// cos/sin (T, D), contiguous, of a floating dtype: angle(t, i) = (position_offset + t) * inv_freq[i mod D/2],
// cos and sin computed in f64, multiplied by attention_scaling and rounded once to the tables' dtype.
void CpuKernels::rope_tables(Stream&, const Tensor& cos, const Tensor& sin, const RopeTableArgs& a) {
  dispatch_float(cos.dtype(), "rope_tables",
                 [&](auto tag) { tables_typed<typename decltype(tag)::type>(cos, sin, a); });
}

// out = x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1); with `transpose` the adjoint
// (the backward): out = x * cos + rotate_half^T(x * sin), rotate_half^T(y) = cat(y2, -y1).
// x and out (B, H, T, D) and cos/sin (T, D) or (B, T, D) may have any strides; one dtype for all four.
void CpuKernels::rope(Stream&, const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
                      bool transpose) {
  dispatch_float(x.dtype(), "apply_rope",
                 [&](auto tag) { rope_typed<typename decltype(tag)::type>(out, x, cos, sin, transpose); });
}

}  // namespace tidal::cpu

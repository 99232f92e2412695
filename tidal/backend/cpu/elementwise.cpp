// CPU kernels of the elementwise family. Outputs are preallocated by the op layer; inputs are
// broadcast to the output's shape and may have any strides.
#include "tidal/backend/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tidal/backend/cpu/elementwise_loops.h"
#include "tidal/backend/cpu/vec_math.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {

Shape broadcast_byte_strides(const Tensor& t, const Shape& shape) {
  Shape st;
  st.resize(shape.size());
  const int off = shape.size() - t.dim();
  for (int d = 0; d < shape.size(); ++d) {
    const int td = d - off;
    st[d] = (td < 0 || t.shape()[td] == 1) ? 0 : t.strides()[td] * t.itemsize();
  }
  return st;
}

namespace {

template <typename T>
void unary_typed(Unary op, const Tensor& out, const Tensor& in, double sd) {
  using A = acc_t<T>;
  const A s = A(sd);
  switch (op) {
    case Unary::neg: return unary_loop<T>(out, in, [](A x) { return -x; });
    case Unary::exp: return unary_loop<T>(out, in, [](A x) { return fast_exp(x); });
    case Unary::log: return unary_loop<T>(out, in, [](A x) { return std::log(x); });
    case Unary::sqrt: return unary_loop<T>(out, in, [](A x) { return std::sqrt(x); });
    case Unary::rsqrt: return unary_loop<T>(out, in, [](A x) { return A(1) / std::sqrt(x); });
    case Unary::abs: return unary_loop<T>(out, in, [](A x) { return std::abs(x); });
    case Unary::sign: return unary_loop<T>(out, in, [](A x) { return A((x > A(0)) - (x < A(0))); });
    case Unary::tanh: return unary_loop<T>(out, in, [](A x) { return std::tanh(x); });
    case Unary::sigmoid: return unary_loop<T>(out, in, [](A x) { return fast_sigmoid(x); });
    case Unary::relu: return unary_loop<T>(out, in, [](A x) { return x > A(0) ? x : A(0); });
    case Unary::square: return unary_loop<T>(out, in, [](A x) { return x * x; });
    case Unary::reciprocal: return unary_loop<T>(out, in, [](A x) { return A(1) / x; });
    case Unary::sin: return unary_loop<T>(out, in, [](A x) { return std::sin(x); });
    case Unary::cos: return unary_loop<T>(out, in, [](A x) { return std::cos(x); });
    case Unary::add_scalar: return unary_loop<T>(out, in, [s](A x) { return x + s; });
    case Unary::mul_scalar: return unary_loop<T>(out, in, [s](A x) { return x * s; });
    case Unary::rsub_scalar: return unary_loop<T>(out, in, [s](A x) { return s - x; });
    case Unary::rdiv_scalar: return unary_loop<T>(out, in, [s](A x) { return s / x; });
    case Unary::pow_scalar:
      if (sd == 2.0) return unary_loop<T>(out, in, [](A x) { return x * x; });
      if (sd == 0.5) return unary_loop<T>(out, in, [](A x) { return std::sqrt(x); });
      return unary_loop<T>(out, in, [s](A x) { return std::pow(x, s); });
    case Unary::clamp_min: return unary_loop<T>(out, in, [s](A x) { return x < s ? s : x; });
    case Unary::clamp_max: return unary_loop<T>(out, in, [s](A x) { return x > s ? s : x; });
  }
}

template <typename T>
void binary_typed(Binary op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha_d) {
  using A = acc_t<T>;
  const A alpha = A(alpha_d);
  switch (op) {
    case Binary::add:
      if (alpha_d == 1.0) return binary_loop<T>(out, a, b, [](A x, A y) { return x + y; });
      return binary_loop<T>(out, a, b, [alpha](A x, A y) { return x + alpha * y; });
    case Binary::sub:
      if (alpha_d == 1.0) return binary_loop<T>(out, a, b, [](A x, A y) { return x - y; });
      return binary_loop<T>(out, a, b, [alpha](A x, A y) { return x - alpha * y; });
    case Binary::mul: return binary_loop<T>(out, a, b, [](A x, A y) { return x * y; });
    case Binary::div: return binary_loop<T>(out, a, b, [](A x, A y) { return x / y; });
    case Binary::pow: return binary_loop<T>(out, a, b, [](A x, A y) { return A(std::pow(x, y)); });
    case Binary::maximum: return binary_loop<T>(out, a, b, [](A x, A y) { return x < y ? y : x; });
    case Binary::minimum: return binary_loop<T>(out, a, b, [](A x, A y) { return y < x ? y : x; });
  }
}

template <typename T, typename F>
void compare_with(Compare op, F&& run) {
  using A = acc_t<T>;
  switch (op) {
    case Compare::eq: return run([](A x, A y) { return uint8_t(x == y); });
    case Compare::ne: return run([](A x, A y) { return uint8_t(x != y); });
    case Compare::lt: return run([](A x, A y) { return uint8_t(x < y); });
    case Compare::le: return run([](A x, A y) { return uint8_t(x <= y); });
    case Compare::gt: return run([](A x, A y) { return uint8_t(x > y); });
    case Compare::ge: return run([](A x, A y) { return uint8_t(x >= y); });
  }
}

// A same-dtype copy whose source is unit-stride along some dim p but not along the destination's
// innermost dim (a transpose): walking it element by element reads one cache line per element.
// Copies (p, last) panels in 32 x 32 tiles instead, so both sides touch whole cache lines.
template <typename W>
void tiled_transpose_copy(const StridedLoop<2>& loop, int p) {
  constexpr int64_t kTile = 16;
  const int nd = loop.shape.size(), last = nd - 1;
  const int64_t rows = loop.shape[p], cols = loop.shape[last];
  const int64_t dr = loop.strides[0][p] / int64_t(sizeof(W)), dc = loop.strides[0][last] / int64_t(sizeof(W));
  const int64_t sr = loop.strides[1][p] / int64_t(sizeof(W)), sc = loop.strides[1][last] / int64_t(sizeof(W));
  Shape outer;  // every other dim
  std::vector<int> outer_dims;
  for (int d = 0; d < nd; ++d)
    if (d != p && d != last) {
      outer.push_back(loop.shape[d]);
      outer_dims.push_back(d);
    }
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  const int64_t tasks = outer.numel() * row_tiles;
  parallel_for(0, tasks, std::max<int64_t>(1, kElementwiseGrain / (kTile * cols)), [&](int64_t t0, int64_t t1) {
    for (int64_t task = t0; task < t1; ++task) {
      int64_t rem = task / row_tiles;
      char* dbase = loop.base[0];
      const char* sbase = loop.base[1];
      for (int k = int(outer_dims.size()) - 1; k >= 0; --k) {
        const int d = outer_dims[size_t(k)];
        const int64_t idx = rem % loop.shape[d];
        rem /= loop.shape[d];
        dbase += idx * loop.strides[0][d];
        sbase += idx * loop.strides[1][d];
      }
      W* dst = reinterpret_cast<W*>(dbase);
      const W* src = reinterpret_cast<const W*>(sbase);
      const int64_t r0 = (task % row_tiles) * kTile, r1 = std::min(rows, r0 + kTile);
      for (int64_t ct = 0; ct < col_tiles; ++ct) {
        const int64_t c0 = ct * kTile, c1 = std::min(cols, c0 + kTile);
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) dst[r * dr + c * dc] = src[r * sr + c * sc];
      }
    }
  });
}

bool try_tiled_copy(const Tensor& dst, const Tensor& src) {
  const Shape& shape = dst.shape();
  const int64_t item = dst.itemsize();
  auto loop = make_loop<2>(shape, {static_cast<char*>(dst.raw_data()), static_cast<char*>(src.raw_data())},
                           {broadcast_byte_strides(dst, shape), broadcast_byte_strides(src, shape)});
  const int nd = loop.shape.size();
  if (nd < 2 || loop.strides[1][nd - 1] == item || loop.shape[nd - 1] < 8) return false;
  int p = -1;
  for (int d = nd - 2; d >= 0; --d)
    if (loop.strides[1][d] == item && loop.shape[d] >= 8) p = d;
  if (p < 0) return false;
  switch (item) {
    case 1: tiled_transpose_copy<uint8_t>(loop, p); return true;
    case 2: tiled_transpose_copy<uint16_t>(loop, p); return true;
    case 4: tiled_transpose_copy<uint32_t>(loop, p); return true;
    case 8: tiled_transpose_copy<uint64_t>(loop, p); return true;
    default: return false;
  }
}

}  // namespace

void CpuKernels::unary(Stream&, Unary op, const Tensor& out, const Tensor& in, double s) {
  if (is_integral(in.dtype())) {
    TIDAL_CHECK(op == Unary::neg || op == Unary::abs || op == Unary::add_scalar || op == Unary::mul_scalar ||
                    op == Unary::rsub_scalar || op == Unary::clamp_min || op == Unary::clamp_max || op == Unary::square,
                "[elementwise] this op needs a floating tensor, got ", in.dtype());
    dispatch_all(in.dtype(), "elementwise", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral_v<T>) {
        const T sv = T(s);
        switch (op) {
          case Unary::neg: return unary_loop<T>(out, in, [](T x) { return T(-x); });
          case Unary::abs: return unary_loop<T>(out, in, [](T x) { return T(x < 0 ? -x : x); });
          case Unary::add_scalar: return unary_loop<T>(out, in, [sv](T x) { return T(x + sv); });
          case Unary::mul_scalar: return unary_loop<T>(out, in, [sv](T x) { return T(x * sv); });
          case Unary::rsub_scalar: return unary_loop<T>(out, in, [sv](T x) { return T(sv - x); });
          case Unary::clamp_min: return unary_loop<T>(out, in, [sv](T x) { return x < sv ? sv : x; });
          case Unary::clamp_max: return unary_loop<T>(out, in, [sv](T x) { return x > sv ? sv : x; });
          case Unary::square: return unary_loop<T>(out, in, [](T x) { return T(x * x); });
          default: return;
        }
      }
    });
    return;
  }
  dispatch_float(in.dtype(), "elementwise",
                 [&](auto tag) { unary_typed<typename decltype(tag)::type>(op, out, in, s); });
}

// out = a op (alpha * b) for add/sub; alpha is ignored by the others.
void CpuKernels::binary(Stream&, Binary op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  dispatch_all(a.dtype(), "elementwise", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      TIDAL_CHECK(op != Binary::pow, "[pow] needs floating tensors, got ", a.dtype());
      const T al = T(alpha);
      switch (op) {
        case Binary::add: return binary_loop<T>(out, a, b, [al](T x, T y) { return T(x + al * y); });
        case Binary::sub: return binary_loop<T>(out, a, b, [al](T x, T y) { return T(x - al * y); });
        case Binary::mul: return binary_loop<T>(out, a, b, [](T x, T y) { return T(x * y); });
        case Binary::div: return binary_loop<T>(out, a, b, [](T x, T y) { return y == 0 ? T(0) : T(x / y); });
        case Binary::maximum: return binary_loop<T>(out, a, b, [](T x, T y) { return x < y ? y : x; });
        case Binary::minimum: return binary_loop<T>(out, a, b, [](T x, T y) { return y < x ? y : x; });
        default: return;
      }
    } else {
      binary_typed<T>(op, out, a, b, alpha);
    }
  });
}

// out (u8) = a op b.
void CpuKernels::compare(Stream&, Compare op, const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_all(a.dtype(), "compare", [&](auto tag) {
    using T = typename decltype(tag)::type;
    compare_with<T>(op, [&](auto f) { binary_loop<T, uint8_t>(out, a, b, f); });
  });
}

// out (u8) = a op s.
void CpuKernels::compare_scalar(Stream&, Compare op, const Tensor& out, const Tensor& a, double s) {
  dispatch_all(a.dtype(), "compare", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const acc_t<T> sv = acc_t<T>(s);
    compare_with<T>(op, [&](auto f) { unary_loop<T, uint8_t>(out, a, [f, sv](acc_t<T> x) { return f(x, sv); }); });
  });
}

// out = cond ? a : b (cond is u8).
void CpuKernels::where(Stream&, const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_all(a.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Shape& shape = out.shape();
    auto loop = make_loop<4>(shape,
                             {static_cast<char*>(out.raw_data()), static_cast<char*>(cond.raw_data()),
                              static_cast<char*>(a.raw_data()), static_cast<char*>(b.raw_data())},
                             {broadcast_byte_strides(out, shape), broadcast_byte_strides(cond, shape),
                              broadcast_byte_strides(a, shape), broadcast_byte_strides(b, shape)});
    for_each(loop, kElementwiseGrain, [](const std::array<char*, 4>& p, const std::array<int64_t, 4>& s, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<T*>(p[0] + i * s[0]) = *reinterpret_cast<const uint8_t*>(p[1] + i * s[1])
                                                     ? *reinterpret_cast<const T*>(p[2] + i * s[2])
                                                     : *reinterpret_cast<const T*>(p[3] + i * s[3]);
    });
  });
}

// out = mask ? value : x (mask is u8).
void CpuKernels::masked_fill(Stream&, const Tensor& out, const Tensor& x, const Tensor& mask, double value) {
  dispatch_all(x.dtype(), "masked_fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = T(acc_t<T>(value));
    const Shape& shape = out.shape();
    auto loop = make_loop<3>(
        shape,
        {static_cast<char*>(out.raw_data()), static_cast<char*>(x.raw_data()), static_cast<char*>(mask.raw_data())},
        {broadcast_byte_strides(out, shape), broadcast_byte_strides(x, shape), broadcast_byte_strides(mask, shape)});
    for_each(loop, kElementwiseGrain, [v](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<T*>(p[0] + i * s[0]) =
            *reinterpret_cast<const uint8_t*>(p[2] + i * s[2]) ? v : *reinterpret_cast<const T*>(p[1] + i * s[1]);
    });
  });
}

// dst = src (broadcast, any strides, converting dtype).
void CpuKernels::copy(Stream&, const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous() && dst.shape() == src.shape()) {
    char* d = static_cast<char*>(dst.raw_data());
    const char* s = static_cast<const char*>(src.raw_data());
    const int64_t bytes = dst.nbytes();
    if (d == s) return;
    parallel_for(0, bytes, int64_t(1) << 20, [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, size_t(e - b)); });
    return;
  }
  if (dst.dtype() == src.dtype() && try_tiled_copy(dst, src)) return;
  dispatch_all(src.dtype(), "copy", [&](auto stag) {
    using S = typename decltype(stag)::type;
    dispatch_all(dst.dtype(), "copy", [&](auto dtag) {
      using D = typename decltype(dtag)::type;
      unary_loop<S, D>(dst, src, [](acc_t<S> x) { return x; });
    });
  });
}

void CpuKernels::fill(Stream&, const Tensor& dst, double value) {
  dispatch_all(dst.dtype(), "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = T(acc_t<T>(value));
    const Shape& shape = dst.shape();
    auto loop = make_loop<1>(shape, {static_cast<char*>(dst.raw_data())}, {broadcast_byte_strides(dst, shape)});
    for_each(loop, kElementwiseGrain, [v](const std::array<char*, 1>& p, const std::array<int64_t, 1>& s, int64_t n) {
      if (s[0] == int64_t(sizeof(T))) {
        T* o = reinterpret_cast<T*>(p[0]);
        std::fill(o, o + n, v);
      } else {
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
      }
    });
  });
}

// dst += alpha * src, in place (src broadcast to dst).
void CpuKernels::add_inplace(Stream& stream, const Tensor& dst, const Tensor& src, double alpha) {
  binary(stream, Binary::add, dst, dst, src, alpha);
}

}  // namespace tidal::cpu
